"""A small byte-level GPT and its training text, shared by the examples and perf scripts.

Text: the reStructuredText sources of the Python documentation that Debian's python3-doc
installs under /usr/share/doc/python3.X/html/_sources (~11 MB of English prose and code),
markup stripped; or any .txt/.rst/.md file or folder passed as ``corpus``.

    apt-get install -y python3-doc      # once, as root

torch is imported by the caller and passed in, so this module imports without it.
"""
from __future__ import annotations

import glob
import hashlib
import math
import os
import re
import sys
from typing import Dict, List, Tuple

import numpy as np

DOC_GLOB = "/usr/share/doc/python3*/html/_sources"


# ---------------------------------------------------------------- text
_ROLE = re.compile(r":[\w:+.-]+:`([^`]*)`")
_ANGLE = re.compile(r"\s*<[^<>]*>$")
_UNDERLINE = re.compile(r"^\s*([=\-~^*#\"'`+.:_])\1{2,}\s*$")
_DIRECTIVE = re.compile(r"^(\s*)\.\.\s+([\w:-]+)::\s*(.*)$")
_DROP_BLOCK = {"index", "toctree", "raw", "only", "highlight", "sectionauthor", "moduleauthor",
               "testsetup", "testcleanup", "impl-detail", "include", "literalinclude", "image",
               "figure", "productionlist", "tabularcolumns", "csv-table", "audit-event",
               "availability", "opcode", "cmdoption", "rubric", "program", "currentmodule"}


def _role_text(m: "re.Match[str]") -> str:
    text = _ANGLE.sub("", m.group(1))
    return text.lstrip("~!")


def clean_rst(src: str) -> str:
    """reST source -> plain text: the prose and code of the page without markup."""
    out: List[str] = []
    skip_indent = None  # inside a dropped block: lines indented deeper than this are skipped
    for line in src.splitlines():
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if skip_indent is not None:
            if not stripped or indent > skip_indent:
                continue
            skip_indent = None
        m = _DIRECTIVE.match(line)
        if m:
            name = m.group(2).split(":")[-1]
            if name in _DROP_BLOCK:
                skip_indent = len(m.group(1))
            elif m.group(3):  # function/class signatures, note titles, ...
                out.append(m.group(1) + m.group(3))
            continue
        if stripped.startswith(".. "):  # comments, link targets, substitutions
            skip_indent = indent
            continue
        if stripped == "..":
            skip_indent = indent
            continue
        if _UNDERLINE.match(line) or stripped == "::":
            continue
        if re.match(r"^\s*:[\w-]+:( |$)", line) and (not out or not out[-1].strip()
                                                      or out[-1].lstrip().startswith(":")
                                                      or re.match(r"^\s", line)):
            continue  # directive options (:module:, :noindex:) and field lists of metadata
        line = _ROLE.sub(_role_text, line)
        line = line.replace("``", "").replace("**", "")
        line = re.sub(r"`([^`<]*?)(?:\s*<[^>]*>)?`_{1,2}", r"\1", line)
        line = re.sub(r"\|(\w[\w -]*)\|", r"\1", line)
        line = line.replace("::", ":") if line.rstrip().endswith("::") else line
        out.append(line.rstrip())
    text = "\n".join(out)
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"


def find_corpus(path: str) -> Tuple[List[str], str]:
    """The files to train on and a description of where they came from."""
    if path:
        if os.path.isfile(path):
            return [path], f"the file {path}"
        if os.path.isdir(path):
            files = sorted(f for f in glob.glob(os.path.join(path, "**", "*"), recursive=True)
                           if f.endswith((".txt", ".rst", ".md")) and os.path.isfile(f))
            if files:
                return files, f"{len(files)} .txt/.rst/.md files under {path}"
        sys.exit(f"--corpus {path}: no such file, or a folder without "
                 ".txt/.rst/.md files")
    dirs = sorted({os.path.realpath(d) for d in glob.glob(DOC_GLOB)})
    for d in reversed(dirs):  # the newest Python's documentation
        files = sorted(glob.glob(os.path.join(d, "**", "*.rst.txt"), recursive=True))
        if len(files) > 50:
            pkg = "python" + os.path.basename(os.path.dirname(os.path.dirname(d)))[6:] + "-doc"
            return files, (f"the reST sources of the Python documentation, {len(files)} files "
                           f"under {d} (Debian package {pkg}, installed by python3-doc)")
    return stdlib_docstrings()


def stdlib_docstrings(limit: int = 4_000_000) -> Tuple[List[str], str]:
    """No Python documentation installed: the docstrings of this interpreter's standard
    library (English prose, on every machine that has Python; no download), written once to
    a cache file (sorted modules, so every machine builds the same text). Up to ``limit``
    bytes."""
    import ast
    import sysconfig
    import tempfile

    lib = sysconfig.get_paths()["stdlib"]
    cache = os.path.join(tempfile.gettempdir(),
                         f"ccompress-stdlib-docstrings-{sys.version_info[0]}.{sys.version_info[1]}"
                         f"-{limit}.txt")
    desc = f"the docstrings of the Python standard library under {lib} (generated into {cache})"
    if os.path.isfile(cache) and os.path.getsize(cache) > 0:
        return [cache], desc
    parts, size = [], 0
    for path in sorted(glob.glob(os.path.join(lib, "**", "*.py"), recursive=True)):
        if os.sep + "test" in path[len(lib):] or "site-packages" in path:
            continue
        try:
            with open(path, encoding="utf-8") as fh:
                tree = ast.parse(fh.read())
        except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                 ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc and len(doc) > 80:
                    parts.append(doc)
                    size += len(doc) + 2
        if size >= limit:
            break
    if size < 100_000:
        sys.exit("no training text found: no Python documentation under "
                 f"{DOC_GLOB} and too little in the standard library's docstrings; pass "
                 "--corpus FILE_OR_FOLDER with any English UTF-8 text (.txt/.rst/.md)")
    tmp = f"{cache}.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write("\n\n".join(parts))
    os.replace(tmp, cache)
    return [cache], desc


def load_text(files: List[str], desc: str) -> Tuple[np.ndarray, np.ndarray, Dict[str, object]]:
    """The training and held-out bytes (every 25th file held out) and where they came from."""
    train, val = [], []
    for i, f in enumerate(files):
        with open(f, encoding="utf-8", errors="replace") as fh:
            raw = fh.read()
        text = clean_rst(raw) if f.endswith((".rst", ".rst.txt")) else raw
        (val if len(files) > 20 and i % 25 == 12 else train).append(text)
    if not val:  # one file: its last 2% is the held-out text
        whole = "\n\n".join(train)
        cut = int(len(whole) * 0.98)
        train, val = [whole[:cut]], [whole[cut:]]
    tr = np.frombuffer("\n\n".join(train).encode("utf-8"), dtype=np.uint8)
    va = np.frombuffer("\n\n".join(val).encode("utf-8"), dtype=np.uint8)
    if tr.size < 100_000:
        sys.exit(f"only {tr.size} bytes of training text in {desc}; need >= 100 KB")
    info = {"corpus": desc, "files": len(files), "train_bytes": int(tr.size),
            "val_bytes": int(va.size),
            "sha256": hashlib.sha256(tr.tobytes() + va.tobytes()).hexdigest()[:16]}
    return tr, va, info


# ---------------------------------------------------------------- model
def causal_attention(F, qkv, out, x, heads: int):
    """Causal multi-head self-attention of ``x`` (batch, time, d) through the block's
    ``qkv`` (d -> 3d) and ``out`` (d -> d) projections: the attention half of a block of
    this module's GPT and of examples/moelm.py's MoE GPT (``F`` is torch.nn.functional)."""
    b, t, d = x.shape
    q, k, v = qkv(x).split(d, dim=2)
    q, k, v = (z.view(b, t, heads, d // heads).transpose(1, 2) for z in (q, k, v))
    a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return out(a.transpose(1, 2).reshape(b, t, d))


def build_model(torch, d: int, layers: int, heads: int, ctx: int):
    """Byte-level pre-LayerNorm GPT: tied embeddings, GELU MLP 4x, GPT-2 initialisation."""
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.attn_qkv, self.attn_out = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.mlp_up, self.mlp_down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            x = x + causal_attention(F, self.attn_qkv, self.attn_out, self.ln1(x), heads)
            return x + self.mlp_down(F.gelu(self.mlp_up(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok_emb = nn.Embedding(256, d)
            self.pos_emb = nn.Parameter(torch.zeros(ctx, d))
            self.h = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f = nn.LayerNorm(d)
            for name, p in self.named_parameters():  # GPT-2 initialisation
                if name.endswith("weight") and p.dim() == 2:
                    resid = name.endswith(("attn_out.weight", "mlp_down.weight"))
                    nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers) if resid else 0.02)
                elif name.endswith("bias"):
                    nn.init.zeros_(p)
            nn.init.normal_(self.pos_emb, 0.0, 0.01)

        def forward(self, idx, targets=None):
            x = self.tok_emb(idx) + self.pos_emb[: idx.shape[1]]
            for blk in self.h:
                x = blk(x)
            logits = self.ln_f(x) @ self.tok_emb.weight.T
            if targets is None:
                return logits
            return F.cross_entropy(logits.reshape(-1, 256), targets.reshape(-1))

    return GPT()


def batch(torch, data: np.ndarray, rng: np.random.Generator, b: int, t: int):
    """b random windows of t+1 bytes: (inputs, next-byte targets) as int64 tensors."""
    starts = rng.integers(0, data.size - t - 1, size=b)
    x = np.stack([data[s:s + t + 1] for s in starts]).astype(np.int64)
    x = torch.from_numpy(x)
    return x[:, :-1], x[:, 1:]


def lr_at(step: int, steps: int, lr: float) -> float:
    """Linear warm-up over the first 5% of the steps, then cosine decay to 10% of lr."""
    warm = max(1, steps // 20)
    if step < warm:
        return lr * (step + 1) / warm
    frac = (step - warm) / max(1, steps - warm)
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
