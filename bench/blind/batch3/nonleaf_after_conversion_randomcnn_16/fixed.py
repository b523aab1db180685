"""The voice style-transfer script sets requires_grad=True on the generated spectrogram and then converts it (.cuda() in the report, a dtype conversion here on CPU), so the tensor handed to Adam is a non-leaf copy and the optimizer refuses it.

source: https://github.com/mazzzystar/randomCNN-voice-transfer/issues/16
symptom: error
rule: ?
shape: input-optimisation script: frozen random CNN nn.Module as feature extractor, content and Gram-matrix style losses, Adam over the generated input tensor
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class RandomCNN(nn.Module):
    def __init__(self, n_freq=8, n_filters=16):
        super().__init__()
        self.conv1 = nn.Conv1d(n_freq, n_filters, kernel_size=3, padding=1)
        self.relu = nn.ReLU()
        for p in self.parameters():
            p.requires_grad_(False)

    def forward(self, x):
        return self.relu(self.conv1(x))


def gram(x):
    b, c, t = x.size()
    return x @ x.transpose(1, 2) / (c * t)


model = RandomCNN()
a_content = torch.randn(1, 8, 20, dtype=torch.float64).abs()  # log-spectrograms from the audio loader (float64)
a_style = torch.randn(1, 8, 20, dtype=torch.float64).abs()
a_C = model(a_content.float())
a_S = model(a_style.float())

a_G_var = (torch.randn(a_content.shape, dtype=torch.float64) * 1e-3).float().requires_grad_(True)
optimizer = torch.optim.Adam([a_G_var], lr=0.05)

style_param, content_param = 1.0, 1.0
for epoch in range(20):
    optimizer.zero_grad()
    a_G = model(a_G_var)
    content_loss = content_param * nn.functional.mse_loss(a_G, a_C)
    style_loss = style_param * nn.functional.mse_loss(gram(a_G), gram(a_S))
    loss = content_loss + style_loss
    loss.backward()
    optimizer.step()

print("loss", round(loss.item(), 4))
print("content_loss", round(content_loss.item(), 4))
print("a_G_norm", round(a_G_var.norm().item(), 4))
