"""train_lora enables (reentrant) gradient checkpointing on a model whose embeddings and base weights are frozen, but never makes the embedding output require grad, so the checkpointed blocks return outputs without a graph and loss.backward() fails with "element 0 of tensors does not require grad".

source: https://github.com/lm-sys/FastChat/pull/1489
symptom: error
rule: ?
shape: LoRA fine-tuning script on a tiny causal LM (frozen embedding/base linears, LoRA adapters, decoder blocks run through torch.utils.checkpoint), one optimizer step
"""
import warnings
import torch
from torch import nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

warnings.filterwarnings("ignore")
torch.manual_seed(0)
VOCAB, DIM = 50, 16


class LoRALinear(nn.Module):
    def __init__(self, base, r=4, alpha=8):
        super().__init__()
        self.base = base
        self.lora_A = nn.Parameter(torch.randn(r, base.in_features) * 0.1)
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r) + 0.01)
        self.scale = alpha / r

    def forward(self, x):
        return self.base(x) + (x @ self.lora_A.T @ self.lora_B.T) * self.scale


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(DIM, DIM)
        self.mlp = nn.Linear(DIM, DIM)

    def forward(self, h):
        return h + self.mlp(torch.tanh(self.q(h)))


class TinyCausalLM(nn.Module):
    def __init__(self, n_layers=2):
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Block() for _ in range(n_layers))
        self.lm_head = nn.Linear(DIM, VOCAB, bias=False)
        self.gradient_checkpointing = False

    def gradient_checkpointing_enable(self):
        self.gradient_checkpointing = True

    def get_input_embeddings(self):
        return self.embed_tokens

    def enable_input_require_grads(self):
        def make_inputs_require_grads(module, input, output):
            output.requires_grad_(True)
        self.get_input_embeddings().register_forward_hook(make_inputs_require_grads)

    def forward(self, input_ids):
        h = self.embed_tokens(input_ids)
        for layer in self.layers:
            if self.gradient_checkpointing and self.training:
                h = checkpoint(layer, h, use_reentrant=True)
            else:
                h = layer(h)
        return self.lm_head(h)


def get_peft_model(model):
    for p in model.parameters():
        p.requires_grad_(False)
    for layer in model.layers:
        layer.q = LoRALinear(layer.q)
    return model


def train_lora(gradient_checkpointing=True):
    model = TinyCausalLM()
    model = get_peft_model(model)
    if gradient_checkpointing:
        model.enable_input_require_grads()
        model.gradient_checkpointing_enable()
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=1e-2)
    ids = torch.randint(0, VOCAB, (4, 9))
    logits = model(ids[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    return model, loss


model, loss = train_lora()


def gnorm(p):
    return None if p.grad is None else round(p.grad.norm().item(), 4)


print("loss", round(loss.item(), 4))
print("grad lora_A layer0", gnorm(model.layers[0].q.lora_A))
print("grad lora_B layer1", gnorm(model.layers[1].q.lora_B))
