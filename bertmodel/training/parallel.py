"""Devices and parallelism, applied around the single-device model in one place.

Order (nanoGPT / torchtitan): move to the device, then torch.compile, then wrap in DDP.
Multi-GPU and multi-node runs are launched by torchrun, which sets RANK, WORLD_SIZE and
LOCAL_RANK; one process per GPU, NCCL (gloo on CPU). Only rank 0 logs and writes files.

FSDP is not used: BERT-large is 340M parameters, i.e. ~5.4 GB of fp32 weights, grads and
Adam moments per GPU, which DDP replicates comfortably on any 24 GB+ GPU. Sharding would
only pay off for much larger encoders than DESIGN.md's presets.
"""
from __future__ import annotations

import io
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from bertmodel.errors import BertmodelError


@dataclass
class Dist:
    rank: int = 0
    local_rank: int = 0
    world: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def ddp(self) -> bool:
        return self.world > 1


def resolve_device(name: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise BertmodelError("--device cuda: no CUDA device is available (torch.cuda.is_available() is False)")
    if name not in ("cuda", "cpu"):
        raise BertmodelError(f"unknown device {name!r}; choose auto, cuda or cpu")
    return name


def setup(device: str = "auto") -> Dist:
    """Read torchrun's environment, start the process group, pick this rank's device."""
    kind = resolve_device(device)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if kind == "cuda":
        torch.cuda.set_device(local_rank)
        dev = torch.device("cuda", local_rank)
        torch.backends.cuda.matmul.allow_tf32 = True  # fp32 matmuls outside autocast
        torch.backends.cudnn.allow_tf32 = True
    else:
        dev = torch.device("cpu")
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if kind == "cuda" else "gloo",
                                device_id=dev if kind == "cuda" else None)
    return Dist(rank, local_rank, world, dev)


def teardown(d: Dist) -> None:
    if d.ddp and dist.is_initialized():
        dist.destroy_process_group()


class SeqDynamic(torch.nn.Module):
    """Calls a compiled model with the (B, T) inputs' T marked dynamic. Only for the
    forward: state dicts come from the plain module, never from this wrapper."""

    def __init__(self, compiled: torch.nn.Module):
        super().__init__()
        self.compiled = compiled

    def forward(self, **tensors):
        for name in ("input_ids", "token_type_ids", "attention_mask"):
            if name in tensors and tensors[name].dim() == 2:
                torch._dynamo.maybe_mark_dynamic(tensors[name], 1)
        return self.compiled(**tensors)


def wrap(model: torch.nn.Module, d: Dist, compile: bool) -> torch.nn.Module:
    """The module to train: `model` (already on d.device), compiled, in DDP."""
    if compile:
        import torch._dynamo.config as dynamo_config

        # Batches are padded to multiples of 8, so up to max_seq_length / 8 lengths: the
        # sequence dimension is marked dynamic (SeqDynamic), so they share one graph
        # instead of one compile each; the limit is raised for what still specialises.
        for name in ("recompile_limit", "cache_size_limit"):
            if hasattr(dynamo_config, name):
                setattr(dynamo_config, name, max(getattr(dynamo_config, name), 128))
        model = SeqDynamic(torch.compile(model))
    if d.ddp:
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model, device_ids=[d.local_rank] if d.device.type == "cuda" else None)
    return model


def all_reduce_sum(t: torch.Tensor, d: Dist) -> torch.Tensor:
    if d.ddp:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def any_rank(flag: bool, d: Dist) -> bool:
    """True on every rank when `flag` is true on any rank (e.g. one rank got SIGTERM)."""
    if not d.ddp:
        return flag
    t = torch.tensor([1.0 if flag else 0.0], device=d.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def gather_states(obj, d: Dist) -> list:
    """Every rank's `obj` (a dict of tensors and plain values), on every rank. Sent as
    torch.save bytes: all_gather_object cannot unpickle tensors in torch 2.13."""
    if not d.ddp:
        return [obj]
    buf = io.BytesIO()
    torch.save(obj, buf)
    out = [None] * d.world
    dist.all_gather_object(out, buf.getvalue())
    return [torch.load(io.BytesIO(b), weights_only=True) for b in out]


def barrier(d: Dist) -> None:
    if d.ddp:
        dist.barrier()
