"""A small softmax classifier: numpy by default, PyTorch on a GPU when both are there.

Nothing here knows about Airflow: the step operators import it inside the job.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np

N_FEATURES = 32
N_CLASSES = 4


def make_dataset(n_samples: int, seed: int = 0) -> np.ndarray:
    """Synthetic data as one float32 matrix: N_FEATURES feature columns, then the label."""
    centers = np.random.default_rng(0).normal(scale=1.0, size=(N_CLASSES, N_FEATURES))
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, N_CLASSES, size=n_samples)
    features = centers[labels] + rng.normal(scale=2.0, size=(n_samples, N_FEATURES))
    return np.hstack([features, labels[:, None]]).astype(np.float32)


def _split(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.ascontiguousarray(data[:, :N_FEATURES]), data[:, N_FEATURES].astype(np.int64)


def _device() -> str:
    try:
        import torch
    except ImportError:
        return "numpy"
    return "cuda" if torch.cuda.is_available() else "numpy"


def _train_numpy(x: np.ndarray, y: np.ndarray, epochs: int, lr: float) -> np.ndarray:
    weights = np.zeros((x.shape[1] + 1, N_CLASSES), dtype=np.float32)
    xb = np.hstack([x, np.ones((len(x), 1), dtype=np.float32)])
    onehot = np.eye(N_CLASSES, dtype=np.float32)[y]
    for epoch in range(epochs):
        logits = xb @ weights
        logits -= logits.max(axis=1, keepdims=True)
        probs = np.exp(logits)
        probs /= probs.sum(axis=1, keepdims=True)
        weights -= lr * xb.T @ (probs - onehot) / len(x)
        if epoch % 10 == 0:
            loss = -np.mean(np.log(probs[np.arange(len(y)), y] + 1e-9))
            print(f"epoch {epoch:3d} loss {loss:.4f}", flush=True)
    return weights


def _train_torch(x: np.ndarray, y: np.ndarray, epochs: int, lr: float) -> np.ndarray:
    import torch

    device = torch.device("cuda")
    print(f"training on {torch.cuda.get_device_name(device)}", flush=True)
    xt = torch.from_numpy(x).to(device)
    yt = torch.from_numpy(y).to(device)
    layer = torch.nn.Linear(x.shape[1], N_CLASSES).to(device)
    optimizer = torch.optim.SGD(layer.parameters(), lr=lr)
    for epoch in range(epochs):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(layer(xt), yt)
        loss.backward()
        optimizer.step()
        if epoch % 10 == 0:
            print(f"epoch {epoch:3d} loss {loss.item():.4f}", flush=True)
    weight = layer.weight.detach().cpu().numpy().T
    bias = layer.bias.detach().cpu().numpy()[None, :]
    return np.vstack([weight, bias]).astype(np.float32)


def train(data: np.ndarray, epochs: int = 50, lr: float = 0.1) -> Path:
    """Fit the classifier and save it as a directory (weights + metadata)."""
    device = _device()
    trainer = _train_torch if device == "cuda" else _train_numpy
    weights = trainer(*_split(data), epochs, lr)
    model_dir = Path(tempfile.mkdtemp(prefix="model-")) / "model"
    model_dir.mkdir()
    np.save(model_dir / "weights.npy", weights)
    (model_dir / "meta.json").write_text(
        json.dumps({"classes": N_CLASSES, "features": N_FEATURES, "device": device})
    )
    return model_dir


def evaluate(model_dir: Path, data: np.ndarray) -> dict[str, float | str]:
    weights = np.load(model_dir / "weights.npy")
    meta = json.loads((model_dir / "meta.json").read_text())
    features, labels = _split(data)
    x = np.hstack([features, np.ones((len(features), 1), dtype=np.float32)])
    accuracy = float(np.mean((x @ weights).argmax(axis=1) == labels))
    return {"accuracy": round(accuracy, 4), "trained_on": meta["device"]}
