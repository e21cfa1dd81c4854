"""The captured test models of tests/routes/test_torch_capture.py, shared with
tests/routes/test_graph_artifact.py: ``models()`` builds each model with its example arguments
(float32, seeded), by key.  Import it after ``pytest.importorskip("torch")``: torch is
imported here at the top."""

from __future__ import annotations

import math

import torch

nn, F = torch.nn, torch.nn.functional


class MLP(nn.Module):
    """linear, gelu, relu, mul, add; a broadcast parameter and a number."""

    def __init__(self):
        super().__init__()
        self.l1, self.l2 = nn.Linear(4, 8), nn.Linear(8, 3)
        self.gain = nn.Parameter(torch.randn(8))

    def forward(self, x):
        h = F.gelu(self.l1(x))
        return self.l2(torch.relu(h) * self.gain + h + 0.5)


class CNN(nn.Module):
    """conv, batch norm (eval: running statistics as constants), relu, max pool, flatten."""

    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(2, 3, 3, padding=1), nn.BatchNorm2d(3)
        self.pool, self.fc = nn.MaxPool2d(2), nn.Linear(27, 2)
        with torch.no_grad():                   # running statistics that are not 0 and 1
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(torch.relu(self.bn(self.conv(x)))), 1))


class Heads(nn.Module):
    """Multi-head attention by hand: views to heads, transpose, matmul, softmax."""

    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))

    def forward(self, x):
        b, t, d = x.shape
        split = lambda z: z.view(b, t, self.h, d // self.h).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d // self.h), dim=-1)
        return self.o((w @ v).transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    """Pre-norm transformer block: layer norm, attention, GELU MLP, dropout (eval), residuals."""

    def __init__(self, d=8, h=2, library=True):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, h, batch_first=True) if library else Heads(d, h)
        self.mlp = nn.Sequential(nn.Linear(d, 16), nn.GELU(), nn.Linear(16, d))
        self.drop, self.library = nn.Dropout(0.1), library

    def forward(self, x):
        y = self.ln1(x)
        a = self.attn(y, y, y, need_weights=False)[0] if self.library else self.attn(y)
        x = x + self.drop(a)
        return x + self.mlp(self.ln2(x))


class Transformer(nn.Module):
    def __init__(self, library):
        super().__init__()
        self.layers = nn.ModuleList([Block(library=library), Block(library=library)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class Language(nn.Module):
    """Token and position embeddings (positions: arange, folded), a head, cross entropy."""

    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(10, 4), nn.Embedding(6, 4)
        self.head = nn.Linear(4, 5)

    def forward(self, ids, target):
        h = self.tok(ids) + self.pos(torch.arange(ids.shape[1]))
        return F.cross_entropy(self.head(h).mean(1), target)


class Misc(nn.Module):
    """The other entries: mm, bmm, addmm, expand, sum, maximum, where (a Boolean buffer),
    avg pool, slice, sqrt, detach (its operand gets no gradient), a float buffer."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))
        self.b = nn.Parameter(torch.randn(4))
        self.register_buffer("mask", torch.tensor([True, False, True, True]))
        self.register_buffer("shift", torch.linspace(1.0, 2.0, 4))

    def forward(self, x):
        h = torch.addmm(self.b, x, self.w) + torch.mm(x, self.w.t())
        h = torch.bmm(h.unsqueeze(0).expand(2, 5, 4), self.w.expand(2, 4, 4)).sum(0)
        h = torch.where(self.mask, torch.maximum(h, x), h.detach() * x)
        p = F.avg_pool2d(h.view(1, 1, 5, 4), 2, stride=1)
        return torch.sqrt(h[1:4, :] ** 2 + self.shift).sum(-1, keepdim=True) + p.sum()


class CausalBlock(nn.Module):
    """Causal transformer block: nn.MultiheadAttention with a Boolean causal attn_mask and a
    key_padding_mask (an argument), then scaled_dot_product_attention with is_causal=True and
    with a float mask buffer (-inf above the diagonal, a distance penalty below)."""

    def __init__(self, d=8, h=2, t=3):
        super().__init__()
        self.h = h
        self.ln1, self.ln2, self.ln3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, h, batch_first=True)
        self.o = nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 16), nn.GELU(), nn.Linear(16, d))
        i = torch.arange(t)
        bias = -0.5 * (i[:, None] - i[None, :]).float()
        self.register_buffer("bias", bias.masked_fill(i[None, :] > i[:, None], -math.inf))

    def forward(self, x, padding):
        b, t, d = x.shape
        causal = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)     # True: not attended
        y = self.ln1(x)
        x = x + self.attn(y, y, y, attn_mask=causal, key_padding_mask=padding,
                          need_weights=False)[0]
        q = self.ln2(x).view(b, t, self.h, d // self.h).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, q, q, is_causal=True)
        c = F.scaled_dot_product_attention(q, q, q, attn_mask=self.bias)
        x = x + self.o((a + c).transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln3(x))


class Upsample(nn.Module):
    """Transposed convolutions: strided with output_padding, then grouped and dilated
    without bias."""

    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(2, 4, 3, stride=2, padding=1, output_padding=1)
        self.mix = nn.ConvTranspose1d(4, 2, 2, groups=2, dilation=2, bias=False)

    def forward(self, x):
        return self.mix(torch.relu(self.up(x)).flatten(2))


class TrainingBatchNorm(nn.Module):
    """Batch norms in training mode: conv, BatchNorm2d (momentum 0.3), relu, linear,
    BatchNorm1d without affine parameters."""

    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(2, 3, 2), nn.BatchNorm2d(3, momentum=0.3)
        self.fc, self.bn1 = nn.Linear(12, 4), nn.BatchNorm1d(4, affine=False)
        with torch.no_grad():                   # running statistics that are not 0 and 1
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        return self.bn1(self.fc(torch.relu(self.bn(self.conv(x))).flatten(1)))


class Dropped(nn.Module):
    """Dropout in training mode, twice."""

    def __init__(self):
        super().__init__()
        self.l1, self.l2 = nn.Linear(4, 6), nn.Linear(6, 3)
        self.d1, self.d2 = nn.Dropout(0.25), nn.Dropout(0.5)

    def forward(self, x):
        return self.d2(self.l2(torch.relu(self.d1(self.l1(x)))))


class Shift(nn.Module):
    """(h + 256) - 256: exact in binary32 at |h| ~ 1, but bfloat16's spacing at 256 is 2,
    so in bfloat16 the result keeps almost nothing of h (a forward error of order 1)."""

    def forward(self, h):
        return (h + 256.0) - 256.0


class Peaked(nn.Module):
    """A saturated softmax (a logit gap of about 10 from its bias): its values are good to
    bfloat16's 2**-9, but the gradient of its logits, p * (g - <p, g>), is about e**-10
    times the cotangents and cancels: in bfloat16 (p's largest entry rounds to 1) its
    weight's gradient is wrong by far more than 100%; in binary32 by about 1e-3."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(0.3 * torch.randn(8, 8))
        self.bias = nn.Parameter(torch.tensor([10.0] + [0.0] * 7))

    def forward(self, h):
        return torch.softmax(F.linear(h, self.weight, self.bias), dim=-1)


class Advised(nn.Module):
    """The precision advisor's model with a known answer: in bfloat16, ``shift`` alone
    breaks the output and ``peaked`` alone breaks a parameter gradient; ``inp``, ``out``
    and the sum at the top level are fine (tests/engine/test_advise.py)."""

    def __init__(self):
        super().__init__()
        self.inp, self.shift, self.peaked = nn.Linear(8, 8), Shift(), Peaked()
        self.out = nn.Linear(8, 4)

    def forward(self, x):
        h = self.inp(x)
        return self.out(self.shift(h) + self.peaked(h))


def advised():
    """(model, example args) of Advised, seeded (a factory for ``advise``)."""
    torch.manual_seed(0)
    return Advised().eval(), (torch.randn(16, 8),)


def language():
    """(model, example args) of the embedding + cross entropy model (a factory: integer
    inputs, token ids and targets)."""
    return models()["embedding-cross-entropy"]


def models() -> dict:
    """key -> (model, example arguments), seeded: the same weights on every call."""
    torch.manual_seed(0)
    return {"mlp": (MLP(), (torch.randn(5, 4),)),
            "cnn": (CNN(), (torch.randn(2, 2, 6, 6),)),
            "transformer": (Transformer(library=True), (torch.randn(2, 3, 8),)),
            "transformer-by-hand": (Transformer(library=False), (torch.randn(2, 3, 8),)),
            "embedding-cross-entropy": (Language(), (torch.randint(0, 10, (3, 4)),
                                                     torch.tensor([0, 4, 2]))),
            "misc": (Misc(), (torch.randn(5, 4),)),
            # (Added later: built after the others, so that their weights stay as they were.)
            "transformer-causal": (CausalBlock(), (torch.randn(2, 3, 8), torch.tensor(
                [[False, False, False], [False, False, True]]))),
            "conv-transpose": (Upsample(), (torch.randn(2, 2, 3, 3),))}


def training_models() -> dict:
    """key -> (model, example arguments) for captures in training mode (in float64 and
    training mode already), seeded."""
    torch.manual_seed(1)
    return {"batch-norm": (TrainingBatchNorm().double().train(),
                           (torch.randn(4, 2, 3, 3, dtype=torch.float64),)),
            "dropout": (Dropped().double().train(), (torch.randn(5, 4, dtype=torch.float64),))}


def in_float64(model, args) -> tuple:
    """(model, args) in float64, the model in eval mode (floating arguments widened exactly;
    integer ones kept)."""
    model = model.double().eval()
    return model, tuple(a.double() if a.is_floating_point() else a for a in args)
