"""A small CTR model trained on ingest batches through a 2-worker PyTorch DataLoader, with exact resume.

Sparse features go through embedding bags (TorchRec's EmbeddingBagCollection when torchrec is installed, plain
``nn.EmbeddingBag`` otherwise), dense ones straight into an MLP.  The user features live once per page view in
an aux table (structured compression): their embeddings are computed once per aux row and spread to the ads
with ``indicators.0``.  Model, optimizer and loader state are checkpointed together; ``--resume`` continues
with exactly the samples the interrupted run had not yet trained on.

    python examples/train_torch.py --data /tmp/ctr --samples 50000 --epochs 2
    python examples/train_torch.py --data /tmp/ctr --max-steps 50 --checkpoint /tmp/ctr/ck.pt   # stops early
    python examples/train_torch.py --data /tmp/ctr --checkpoint /tmp/ctr/ck.pt --resume          # and goes on
"""

import argparse
import json
import os

import torch
from torch import nn
from torchdata.stateful_dataloader import StatefulDataLoader

import ingest
from ingest import synthetic
from ingest.torch import ReaderDataset

try:
    from torchrec.modules.embedding_configs import EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection
except ImportError:  # or torchrec's fbgemm does not load here
    EmbeddingBagCollection = None

USER = ["uid", "age", "gender", "clk_hist", "cate_pref"]  # sparse, table 1 (one row per page view)
AD = ["item", "cate", "shop", "brand", "title", "tags"]  # sparse, table 0 (one row per ad)
BUCKETS = 20_011  # ids are hashed into this many rows per feature
DIM = 8


def prepare(folder, samples, seed=0):
    """Synthetic samples whose clicks depend on their features, as pb with the user features in table 1."""
    pb = os.path.join(folder, "train.pb")
    if not os.path.exists(pb):
        os.makedirs(folder, exist_ok=True)
        text = os.path.join(folder, "train.txt")
        synthetic.write(text, samples, seed, learnable=True)
        ingest.convert([text], pb, aux=USER + ["user_emb"], log=lambda *_: None)
    return pb


def make_reader(pb, epochs, batch_size):
    reader = ingest.DataReader("train", paths=[pb], file_type=ingest.parsers.pb)
    reader.batch_size(batch_size).label_count(2).epochs(epochs).pad(False)
    for name in AD + USER:
        reader.feature(name=name, type=ingest.features.sparse, serialized=True, table=int(name in USER))
    reader.feature(name="user_emb", type=ingest.features.dense, nvec=8, table=1)
    reader.feature(name="ad_ctx", type=ingest.features.dense, nvec=4)
    return reader


class Bags(nn.Module):
    """Sum-pooled embeddings of some sparse features of one table: ``[rows, DIM * features]``."""

    def __init__(self, names):
        super().__init__()
        self.names = names
        if EmbeddingBagCollection is not None:
            self.ebc = EmbeddingBagCollection(
                tables=[
                    EmbeddingBagConfig(name=n, embedding_dim=DIM, num_embeddings=BUCKETS, feature_names=[n])
                    for n in names
                ]
            )
        else:
            self.bags = nn.ModuleList(nn.EmbeddingBag(BUCKETS, DIM, mode="sum") for _ in names)

    def forward(self, batch):
        if EmbeddingBagCollection is not None:
            from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

            rows = len(batch[f"{self.names[0]}.offsets"]) - 1
            kjt = KeyedJaggedTensor(
                keys=self.names,
                values=torch.cat([batch[f"{n}.ids"] % BUCKETS for n in self.names]),
                lengths=torch.cat([torch.diff(batch[f"{n}.offsets"]) for n in self.names]).int(),
                stride=rows,
            )
            return self.ebc(kjt).values()
        return torch.cat(
            [bag(batch[f"{n}.ids"] % BUCKETS, batch[f"{n}.offsets"][:-1]) for n, bag in zip(self.names, self.bags)],
            dim=1,
        )


class CTR(nn.Module):
    def __init__(self):
        super().__init__()
        self.ad, self.user = Bags(AD), Bags(USER)
        width = DIM * (len(AD) + len(USER)) + 8 + 4
        self.mlp = nn.Sequential(nn.Linear(width, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, batch):
        user = torch.cat([self.user(batch), batch["user_emb"] / 20000], dim=1)[batch["indicators.0"].long()]
        return self.mlp(torch.cat([self.ad(batch), batch["ad_ctx"] / 20000, user], dim=1)).squeeze(1)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="folder for the generated samples")
    parser.add_argument("--samples", type=int, default=50_000)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--max-steps", type=int, default=None, help="stop (and checkpoint) after this many steps")
    parser.add_argument("--checkpoint", help="where model, optimizer and loader state are saved")
    parser.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    args = parser.parse_args(argv)

    torch.manual_seed(0)
    pb = prepare(args.data, args.samples)
    model = CTR()
    optimizer = torch.optim.Adagrad(model.parameters(), lr=0.05)
    loader = StatefulDataLoader(
        ReaderDataset(make_reader(pb, args.epochs, args.batch_size)),
        batch_size=None,
        num_workers=args.workers,
        prefetch_factor=8 if args.workers else None,
    )
    step, samples, losses = 0, 0, []
    if args.resume:
        saved = torch.load(args.checkpoint, weights_only=False)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        loader.load_state_dict(saved["loader"])
        step, samples = saved["step"], saved["samples"]
    for batch in loader:
        loss = nn.functional.binary_cross_entropy_with_logits(model(batch), batch["labels"][:, 0])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        samples += batch["size"]
        losses.append(loss.item())
        if step % 50 == 0:
            print(f"step {step}: loss {sum(losses[-50:]) / len(losses[-50:]):.4f}", flush=True)
        if args.max_steps is not None and step >= args.max_steps:
            break
    if args.checkpoint:
        torch.save(
            {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "loader": loader.state_dict(),
                "step": step,
                "samples": samples,
            },
            args.checkpoint,
        )
    window = max(1, min(50, len(losses) // 4))
    print(
        json.dumps(
            {
                "steps": step,
                "samples": samples,
                "torchrec": EmbeddingBagCollection is not None,
                "first_loss": sum(losses[:window]) / window if losses else None,
                "last_loss": sum(losses[-window:]) / window if losses else None,
            }
        )
    )


if __name__ == "__main__":
    main()
