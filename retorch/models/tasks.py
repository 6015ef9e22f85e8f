"""What the capstone's Transformer learns, shipped with the package (no download).

- :func:`sort_task`: sequences of ``n`` digits followed by the same digits sorted; the model
  sees ``unsorted + sorted[:-1]`` and must predict the sorted half (the task of minGPT's
  ``demo.ipynb``). Its answer is known, so accuracy is exact: the share of sorted tokens the
  model predicts right from the unsorted ones and the sorted prefix.
- :func:`char_corpus`: a small character-level corpus (``data/corpus.txt``, prose written for
  this course about what it rebuilds), with its vocabulary and windows of ``block_size + 1``
  characters.

Tensors are made by ``make`` (``torch.tensor``, or ``retorch.dispatch.from_torch`` over it),
from a seeded ``torch.Generator``, so both libraries get the same values.
"""

from __future__ import annotations

import pathlib

import torch

CORPUS = pathlib.Path(__file__).with_name("data") / "corpus.txt"


def sort_task(count: int, n: int = 6, digits: int = 10, seed: int = 0):
    """``(x, y)`` int64 of shape ``(count, 2n - 1)``: ``x`` the sequence, ``y`` it shifted by
    one (the next-token targets). Positions ``n - 1 ..`` of ``y`` are the sorted digits."""
    g = torch.Generator().manual_seed(seed)
    unsorted = torch.randint(0, digits, (count, n), generator=g)
    seq = torch.cat([unsorted, torch.sort(unsorted, dim=1).values], dim=1)
    return seq[:, :-1].contiguous(), seq[:, 1:].contiguous()


def char_corpus():
    """``(text, chars)``: the corpus and its sorted characters (the vocabulary)."""
    text = CORPUS.read_text()
    return text, sorted(set(text))


def encode(text: str, chars) -> torch.Tensor:
    index = {c: i for i, c in enumerate(chars)}
    return torch.tensor([index[c] for c in text], dtype=torch.int64)


def decode(ids, chars) -> str:
    return "".join(chars[int(i)] for i in ids)


def char_windows(block_size: int, count: int, seed: int = 0):
    """``count`` random windows of the corpus: ``(x, y)`` of shape ``(count, block_size)``,
    ``y`` the next characters; and the vocabulary."""
    text, chars = char_corpus()
    data = encode(text, chars)
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, len(data) - block_size - 1, (count,), generator=g)
    x = torch.stack([data[s : s + block_size] for s in starts.tolist()])
    y = torch.stack([data[s + 1 : s + 1 + block_size] for s in starts.tolist()])
    return x, y, chars
