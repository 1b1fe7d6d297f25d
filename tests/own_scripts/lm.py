"""Train a small causal transformer language model on random tokens."""
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=12)
parser.add_argument("--token-accuracy", action="store_true", help="accuracy, token by token")
parser.add_argument("--keep-logits", action="store_true", help="keep every step's logits")
args = parser.parse_args()

torch.manual_seed(0)
VOCAB, CONTEXT, WIDTH, BATCH = 512, 64, 128, 16


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.position = nn.Parameter(torch.zeros(CONTEXT, WIDTH))
        layer = nn.TransformerEncoderLayer(WIDTH, nhead=4, dim_feedforward=4 * WIDTH, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, num_layers=2)
        self.head = nn.Linear(WIDTH, VOCAB)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(CONTEXT))

    def forward(self, tokens):
        x = self.embed(tokens) + self.position
        return self.head(self.blocks(x, mask=self.mask, is_causal=True))


def token_accuracy(logits, targets):
    hits, total = 0, 0
    for b in range(targets.shape[0]):
        for t in range(targets.shape[1]):
            hits += int(logits[b, t].argmax().item() == targets[b, t].item())
            total += 1
    return hits / total


model = LM()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
corpus = torch.randint(0, VOCAB, (args.steps, BATCH, CONTEXT + 1))
kept = []
for step in range(args.steps):
    tokens, targets = corpus[step, :, :-1], corpus[step, :, 1:]
    logits = model(tokens)
    loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if args.token_accuracy:
        accuracy = token_accuracy(logits, targets)
    if args.keep_logits:
        kept.append(logits)
print(f"trained {args.steps} steps, last loss {loss.item():.3f}")
