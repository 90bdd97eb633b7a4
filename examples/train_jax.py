"""The CTR model of train_torch.py in JAX: fixed-shape batches (ingest.jax), one jitted step per id bucket.

Sum-pooled embeddings of the sparse features (a segment sum over each row's ids), the user features once per
page view (aux table 1) spread to the ads with ``indicators.0``, an MLP, Adagrad (as train_torch.py).

    python examples/train_jax.py --data /tmp/ctr --samples 50000 --epochs 2
"""

import argparse
import json

import jax
import jax.numpy as jnp
import numpy as np

import ingest.jax
from train_torch import AD, BUCKETS, DIM, USER, make_reader, prepare

jax.config.update("jax_enable_x64", True)  # the ids are 64-bit


def init(key):
    keys = jax.random.split(key, len(AD) + len(USER) + 2)
    width = DIM * (len(AD) + len(USER)) + 8 + 4
    params = {name: jax.random.normal(k, (BUCKETS, DIM)) * 0.05 for name, k in zip(AD + USER, keys)}
    params["w1"] = jax.random.normal(keys[-2], (width, 64)) * (2 / width) ** 0.5
    params["b1"] = jnp.zeros(64)
    params["w2"] = jax.random.normal(keys[-1], (64, 1)) * 0.1
    params["b2"] = jnp.zeros(1)
    return params


def bags(params, batch, names, rows):
    """``[rows, DIM * len(names)]``: per feature, the sum of its rows' id embeddings (padded ids fall beyond the
    last row and are dropped)."""
    out = []
    for name in names:
        ids, offsets = batch[f"{name}.ids"], batch[f"{name}.offsets"]
        row = jnp.searchsorted(offsets, jnp.arange(ids.shape[0]), side="right") - 1
        vectors = params[name][ids % BUCKETS]
        out.append(jax.ops.segment_sum(vectors, row, num_segments=rows))
    return jnp.concatenate(out, axis=1)


def loss_fn(params, batch):
    rows0, rows1 = batch["labels"].shape[0], batch["user_emb"].shape[0]
    user = jnp.concatenate([bags(params, batch, USER, rows1), batch["user_emb"] / 20000], axis=1)
    x = jnp.concatenate([bags(params, batch, AD, rows0), batch["ad_ctx"] / 20000, user[batch["indicators.0"]]], 1)
    logits = (jax.nn.relu(x @ params["w1"] + params["b1"]) @ params["w2"] + params["b2"])[:, 0]
    labels = batch["labels"][:, 0]
    real = jnp.arange(rows0) < batch["size"]  # padded rows do not count
    losses = jnp.maximum(logits, 0) - logits * labels + jnp.log1p(jnp.exp(-jnp.abs(logits)))
    return jnp.sum(jnp.where(real, losses, 0)) / batch["size"]


@jax.jit
def step(params, squares, batch, lr):
    """One Adagrad step: ``squares`` sums each parameter's squared gradients."""
    loss, grads = jax.value_and_grad(loss_fn)(params, batch)
    squares = jax.tree_util.tree_map(lambda s, g: s + g * g, squares, grads)
    params = jax.tree_util.tree_map(lambda p, g, s: p - lr * g / (jnp.sqrt(s) + 1e-10), params, grads, squares)
    return params, squares, loss


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="folder for the generated samples")
    parser.add_argument("--samples", type=int, default=50_000)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args(argv)

    reader = make_reader(prepare(args.data, args.samples), args.epochs, args.batch_size).threads(2)
    params = init(jax.random.PRNGKey(0))
    squares = jax.tree_util.tree_map(jnp.zeros_like, params)
    losses = []
    for batch in ingest.jax.batches(reader):
        params, squares, loss = step(params, squares, batch, args.lr)
        losses.append(float(loss))
        if len(losses) % 50 == 0:
            print(f"step {len(losses)}: loss {np.mean(losses[-50:]):.4f}", flush=True)
    window = max(1, min(50, len(losses) // 4))
    print(
        json.dumps(
            {
                "steps": len(losses),
                "compilations": step._cache_size(),
                "first_loss": float(np.mean(losses[:window])),
                "last_loss": float(np.mean(losses[-window:])),
            }
        )
    )


if __name__ == "__main__":
    main()
