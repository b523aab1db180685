"""The fine-tuning script builds the AdamW optimizer from model.named_parameters() and only then calls resize_token_embeddings, which replaces the (tied) embedding matrix with a new Parameter the optimizer never sees, so the token embeddings are never updated.

source: https://github.com/huggingface/transformers/pull/3532
symptom: no-training
rule: ?
shape: language-model fine-tuning script: train() with no-decay parameter groups, AdamW and linear warmup schedule, grad clipping, a GPT-style model with tied input/output embeddings and resize_token_embeddings, several optimizer steps
wrong: other
why: re-creating the optimizer after the resize leaves the scheduler attached to the old optimizer, so the new one runs at a constant learning rate without warmup/decay and with AdamW's default weight decay on every parameter (no no-decay group).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class Args:
    weight_decay = 0.01
    learning_rate = 5e-3
    adam_epsilon = 1e-8
    warmup_steps = 5
    max_grad_norm = 1.0
    max_steps = 30


class TinyGPT(nn.Module):
    def __init__(self, vocab_size=20, dim=16):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, dim)
        self.h = nn.Linear(dim, dim)
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab_size, bias=False)
        nn.init.normal_(self.wte.weight, std=0.02)
        self.lm_head.weight = self.wte.weight

    def resize_token_embeddings(self, new_num_tokens):
        old = self.wte
        new = nn.Embedding(new_num_tokens, old.embedding_dim)
        new.weight.data.normal_(mean=0.0, std=0.02)
        n = min(old.num_embeddings, new_num_tokens)
        new.weight.data[:n, :] = old.weight.data[:n, :]
        self.wte = new
        self.lm_head.weight = self.wte.weight
        return self.wte

    def forward(self, input_ids, labels):
        h = self.wte(input_ids)
        h = h + torch.tanh(self.h(torch.cumsum(h, 1) / torch.arange(1, h.shape[1] + 1).view(1, -1, 1)))
        logits = self.lm_head(self.ln_f(h))
        return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1))


def get_linear_schedule_with_warmup(optimizer, num_warmup_steps, num_training_steps):
    def lr_lambda(current_step):
        if current_step < num_warmup_steps:
            return float(current_step) / float(max(1, num_warmup_steps))
        return max(0.0, float(num_training_steps - current_step) / float(max(1, num_training_steps - num_warmup_steps)))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)


def train(args, train_data, model, tokenizer_len):
    t_total = args.max_steps
    no_decay = ["bias", "LayerNorm.weight", "ln_f.weight"]
    optimizer_grouped_parameters = [
        {
            "params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)],
            "weight_decay": args.weight_decay,
        },
        {"params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(optimizer_grouped_parameters, lr=args.learning_rate, eps=args.adam_epsilon)
    scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=args.warmup_steps, num_training_steps=t_total)

    model.resize_token_embeddings(tokenizer_len)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, eps=args.adam_epsilon)

    model.zero_grad()
    global_step = 0
    while global_step < t_total:
        batch = train_data[(global_step * 8) % len(train_data):][:8]
        model.train()
        loss = model(batch, labels=batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
        optimizer.step()
        scheduler.step()
        model.zero_grad()
        global_step += 1
    return global_step, loss


model = TinyGPT(vocab_size=20)
tokenizer_len = 22  # two added special tokens
base = torch.randint(0, 20, (64, 1))
train_data = (base + torch.arange(10).view(1, -1) * 2) % 20
train_data[:, 0] = 20  # new <bos> token
train_data[::2, -1] = 21  # new <eos> token
emb0 = model.wte.weight.detach()[:20].clone()
global_step, loss = train(Args(), train_data, model, tokenizer_len)
print("loss", round(loss.item(), 4))
print("emb_drift", round((model.wte.weight[:20] - emb0).norm().item(), 4))
print("h_weight_norm", round(model.h.weight.norm().item(), 4))
