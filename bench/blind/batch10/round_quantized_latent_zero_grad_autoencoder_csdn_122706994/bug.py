"""The autoencoder quantizes its latent code with torch.round, whose derivative is zero almost everywhere, so no gradient reaches the encoder and it never trains.

source: https://blog.youkuaiyun.com/leelitian3/article/details/122706994
symptom: silent
rule: ?
shape: flat compression-autoencoder script: encoder, rounding quantizer on the latent, decoder, MSE reconstruction, Adam training loop over several steps
"""
import torch
import torch.nn as nn

torch.manual_seed(0)

encoder = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
decoder = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 16))
opt = torch.optim.Adam(list(encoder.parameters()) + list(decoder.parameters()), lr=3e-3)

x = torch.randn(128, 4) @ torch.randn(4, 16)
w0 = encoder[0].weight.detach().clone()
for step in range(40):
    opt.zero_grad()
    z3 = encoder(x) * 4.0
    z3_rounded = torch.round(z3)  # bench: bug
    x_hat = decoder(z3_rounded / 4.0)
    loss = ((x_hat - x) ** 2).mean()
    loss.backward()
    if step == 0:
        enc_grad = encoder[0].weight.grad.norm().item()
    opt.step()
print("loss", round(loss.item(), 4))
print("encoder_grad_norm_step0", round(enc_grad, 4))
print("encoder_drift", round((encoder[0].weight - w0).norm().item(), 4))
