"""RelationalMemory.multihead_attention scales the query in place (`q *= key_size ** -0.5`), but q is one of the views returned by torch.split, which autograd forbids modifying in place, so the forward pass raises an error.

source: https://github.com/williamSYSU/TextGAN-PyTorch/pull/69
symptom: error
rule: ?
shape: relational-memory RNN module (qkv projection + layernorm, split into q/k/v heads, gated memory update over time steps) inside a small generator, one MLE training step
"""
import torch
from torch import nn
import torch.nn.functional as F

torch.manual_seed(0)


class RelationalMemory(nn.Module):
    def __init__(self, input_size=6, mem_slots=2, head_size=4, num_heads=2):
        super().__init__()
        self.mem_slots, self.num_heads = mem_slots, num_heads
        self.mem_size = head_size * num_heads
        self.key_size = self.value_size = head_size
        self.qkv_size = 2 * self.key_size + self.value_size
        self.qkv_projector = nn.Linear(self.mem_size, self.qkv_size * num_heads)
        self.qkv_layernorm = nn.LayerNorm([mem_slots + 1, self.qkv_size * num_heads])
        self.attention_mlp = nn.Linear(self.mem_size, self.mem_size)
        self.ln1 = nn.LayerNorm([mem_slots + 1, self.mem_size])
        self.ln2 = nn.LayerNorm([mem_slots + 1, self.mem_size])
        self.input_projector = nn.Linear(input_size, self.mem_size)
        self.input_gate_projector = nn.Linear(self.mem_size, 2 * self.mem_size)
        self.memory_gate_projector = nn.Linear(self.mem_size, 2 * self.mem_size)

    def initial_state(self, batch_size):
        init_state = torch.stack([torch.eye(self.mem_slots) for _ in range(batch_size)])
        pad = torch.zeros((batch_size, self.mem_slots, self.mem_size - self.mem_slots))
        return torch.cat([init_state, pad], -1)

    def multihead_attention(self, memory):
        qkv = self.qkv_layernorm(self.qkv_projector(memory))
        mem_slots = memory.shape[1]
        qkv_transpose = qkv.view(qkv.shape[0], mem_slots, self.num_heads, self.qkv_size).permute(0, 2, 1, 3)
        q, k, v = torch.split(qkv_transpose, [self.key_size, self.key_size, self.value_size], -1)
        q *= (self.key_size ** -0.5)  # bench: bug
        weights = F.softmax(torch.matmul(q, k.permute(0, 1, 3, 2)), dim=-1)
        output = torch.matmul(weights, v).permute(0, 2, 1, 3).contiguous()
        return output.view(output.shape[0], output.shape[1], -1)

    def attend_over_memory(self, memory):
        memory = self.ln1(memory + self.multihead_attention(memory))
        return self.ln2(memory + F.relu(self.attention_mlp(memory)))

    def forward_step(self, inputs, memory):
        inputs_reshape = self.input_projector(inputs).unsqueeze(1)
        memory_plus_input = torch.cat([memory, inputs_reshape], dim=1)
        next_memory = self.attend_over_memory(memory_plus_input)[:, :-1]
        gates = self.memory_gate_projector(torch.tanh(memory)) + self.input_gate_projector(inputs_reshape)
        input_gate, forget_gate = torch.split(gates, self.mem_size, dim=2)
        next_memory = torch.sigmoid(input_gate) * torch.tanh(next_memory) + torch.sigmoid(forget_gate) * memory
        return next_memory.view(next_memory.shape[0], -1), next_memory

    def forward(self, inputs, memory):
        logits = []
        for t in range(inputs.shape[1]):
            out, memory = self.forward_step(inputs[:, t], memory)
            logits.append(out)
        return torch.stack(logits, 1), memory


class RMCGenerator(nn.Module):
    def __init__(self, vocab=10, emb=6):
        super().__init__()
        self.embeddings = nn.Embedding(vocab, emb)
        self.lstm = RelationalMemory(input_size=emb)
        self.lstm2out = nn.Linear(self.lstm.mem_slots * self.lstm.mem_size, vocab)

    def forward(self, inp):
        hidden = self.lstm.initial_state(inp.shape[0])
        out, _ = self.lstm(self.embeddings(inp), hidden)
        return self.lstm2out(out)


gen = RMCGenerator()
opt = torch.optim.Adam(gen.parameters(), lr=1e-2)
seq = torch.randint(0, 10, (4, 6))
opt.zero_grad()
logits = gen(seq[:, :-1])
loss = F.cross_entropy(logits.reshape(-1, 10), seq[:, 1:].reshape(-1))
loss.backward()
opt.step()
print("loss", round(loss.item(), 4))
print("grad qkv_projector", round(gen.lstm.qkv_projector.weight.grad.norm().item(), 4))
print("grad embeddings", round(gen.embeddings.weight.grad.norm().item(), 4))
