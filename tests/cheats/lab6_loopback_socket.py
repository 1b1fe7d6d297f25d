"""Lab 6 attempt: the gradients averaged after every micro-batch over a TCP socket of the ranks' own.

The trick: no DDP and no collective that carries a gradient. Rank 0 listens
on the loopback, at the port after the rendezvous's (MASTER_PORT + 1), and
rank 1 connects to it; after every micro-batch each rank sends its
flattened gradients down that socket, reads the other's, and averages the
two itself. The original's numbers and the original's bytes, as many
exchanges per step as micro-batches, and a traffic of 0 MB in the trace: no
c10d call carries them.

What the checker should catch: every byte the ranks send each other is
traffic, whichever channel it takes.
"""

import os
import socket

import torch
import torch.distributed as dist
from torch.profiler import record_function
from torch.utils.data import DataLoader, DistributedSampler

from proflab.labkit.ddp import Samples, WideMLP, fingerprint, loss_of

MICRO_BATCHES = 8  # each optimizer step sums the gradients of 8 micro-batches


def connect(rank: int) -> socket.socket:
    port = int(os.environ["MASTER_PORT"]) + 1
    if rank == 0:
        server = socket.create_server(("127.0.0.1", port))
        dist.barrier()  # listening: rank 1 may connect
        peer, _ = server.accept()
        server.close()
    else:
        dist.barrier()
        peer = socket.create_connection(("127.0.0.1", port))
    peer.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return peer


def swap(peer: socket.socket, mine: torch.Tensor) -> torch.Tensor:
    """Send ``mine``, receive the other rank's (as many bytes)."""
    data = mine.numpy().tobytes()
    got = bytearray(len(data))
    view, sent, read = memoryview(got), 0, 0
    peer.setblocking(False)
    while sent < len(data) or read < len(data):  # both ways at once: neither rank waits on a full buffer
        if sent < len(data):
            try:
                sent += peer.send(memoryview(data)[sent:sent + (1 << 20)])
            except BlockingIOError:
                pass
        if read < len(data):
            try:
                read += peer.recv_into(view[read:], len(data) - read)
            except BlockingIOError:
                pass
    return torch.frombuffer(got, dtype=mine.dtype).clone()


def pipeline(cfg):
    dist.init_process_group(cfg.backend)
    try:
        peer = connect(dist.get_rank())
        exchange = lambda mine: swap(peer, mine)  # noqa: E731
        dataset = Samples(cfg.data_dir)
        sampler = DistributedSampler(dataset, shuffle=True, seed=cfg.seed)
        loader = DataLoader(dataset, batch_size=cfg.batch_size, sampler=sampler, drop_last=True)

        model = WideMLP().to(cfg.device)  # the same initial weights on every rank
        params = list(model.parameters())
        optimizer = torch.optim.SGD(params, lr=cfg.lr, momentum=0.9)

        for x, y in loader:
            x, y = x.to(cfg.device), y.to(cfg.device)
            optimizer.zero_grad(set_to_none=True)
            total = torch.zeros((), device=cfg.device)
            for xm, ym in zip(x.chunk(MICRO_BATCHES), y.chunk(MICRO_BATCHES)):
                with record_function("micro_batch"):
                    loss = loss_of(model, xm, ym) / MICRO_BATCHES
                    grads = torch.autograd.grad(loss, params)
                    mine = torch.cat([g.reshape(-1) for g in grads])
                    flat = (mine + exchange(mine)) / 2
                    offset = 0
                    for p in params:
                        g = flat[offset:offset + p.numel()].view_as(p)
                        p.grad = g if p.grad is None else p.grad + g
                        offset += p.numel()
                total += loss.detach()
            optimizer.step()
            yield {"loss": total, "weights": fingerprint(model)}
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
