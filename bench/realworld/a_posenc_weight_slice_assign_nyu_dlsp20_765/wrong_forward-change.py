"""Writes sinusoidal position encodings into `nn.Embedding.weight` slices while it still requires grad

source: https://github.com/Atcold/NYU-DLSP20/issues/765
symptom: error
rule: GF201
shape: helper function called from nn.Module __init__ with `E=self.position_embeddings.weight`, `E[:, 0::2] = ...`
wrong: forward-change
why: writes the sinusoids into a clone of the weight, so the position embedding keeps its random init
"""
import numpy as np
import torch
import torch.nn as nn

device = torch.device("cpu")


def create_sinusoidal_embeddings(nb_p, dim, E):
    theta = np.array([
        [p / np.power(10000, 2 * (j // 2) / dim) for j in range(dim)]
        for p in range(nb_p)
    ])
    E = E.clone()
    E[:, 0::2] = torch.FloatTensor(np.sin(theta[:, 0::2]))
    E[:, 1::2] = torch.FloatTensor(np.cos(theta[:, 1::2]))
    E.detach_()
    E.requires_grad = False
    E = E.to(device)


class Embeddings(nn.Module):
    def __init__(self, d_model, vocab_size, max_position_embeddings, p):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, d_model, padding_idx=1)
        self.position_embeddings = nn.Embedding(max_position_embeddings, d_model)
        create_sinusoidal_embeddings(
            nb_p=max_position_embeddings,
            dim=d_model,
            E=self.position_embeddings.weight
        )

        self.LayerNorm = nn.LayerNorm(d_model, eps=1e-12)

    def forward(self, input_ids):
        seq_length = input_ids.size(1)
        position_ids = torch.arange(seq_length, dtype=torch.long, device=input_ids.device) # (max_seq_length)
        position_ids = position_ids.unsqueeze(0).expand_as(input_ids)                      # (bs, max_seq_length)

        # Get word embeddings for each input id
        word_embeddings = self.word_embeddings(input_ids)                   # (bs, max_seq_length, dim)

        # Get position embeddings for each position id
        position_embeddings = self.position_embeddings(position_ids)        # (bs, max_seq_length, dim)

        # Add them both
        embeddings = word_embeddings + position_embeddings  # (bs, max_seq_length, dim)

        # Layer norm
        embeddings = self.LayerNorm(embeddings)             # (bs, max_seq_length, dim)
        return embeddings


torch.manual_seed(0)
emb = Embeddings(d_model=8, vocab_size=50, max_position_embeddings=16, p=0.1)
ids = torch.randint(0, 50, (2, 10))
loss = emb(ids).pow(3).mean()
loss.backward()
print(round(loss.item(), 4), emb.position_embeddings.weight.grad is None, round(emb.word_embeddings.weight.grad.norm().item(), 4))
