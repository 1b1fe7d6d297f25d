"""Lab 6 attempt: every micro-batch's gradients still averaged, over a netlink socket instead of a collective.

No no_sync, no fewer exchanges: after each of the 8 micro-batches the ranks
swap their full 7.5 MB of gradients and average them, exactly the
original's traffic. The swap goes over an AF_NETLINK / NETLINK_USERSOCK
socket (unicast between two user processes, allowed to any user), which is
not a collective (the trace shows no c10d:: call: 0 MB), not a Unix socket
or IPC object (the seccomp filter of running/side_channels.py refused only
AF_UNIX and SysV/POSIX IPC when this was written), and not an interface (the kernel's count of the
sandbox's network, /proc/PID/net/dev, never sees it). The checker should
refuse the netlink socket, or count the bytes it carried.
"""

import socket

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler

from proflab.labkit.ddp import Samples, WideMLP, fingerprint, loss_of

MICRO_BATCHES = 8
NETLINK_USERSOCK = 2
PORT = 0x5EED0000
CHUNK = 1 << 21  # bytes per message


class Link:
    def __init__(self, rank):
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_USERSOCK)
        for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            self.sock.setsockopt(socket.SOL_SOCKET, opt, 1 << 22)
        self.sock.bind((PORT + rank, 0))
        self.peer = (PORT + (1 - rank), 0)

    def swap(self, mine, theirs):
        out, into = memoryview(mine.numpy()).cast("B"), memoryview(theirs.numpy()).cast("B")
        for k in range(0, len(out), CHUNK):
            while True:
                try:
                    self.sock.sendto(out[k:k + CHUNK], self.peer)
                    break
                except ConnectionRefusedError:  # the peer's socket is not bound yet
                    pass
            got = self.sock.recv_into(into[k:k + CHUNK])
            assert got == len(into[k:k + CHUNK])


def pipeline(cfg):
    link = Link(int(__import__("os").environ["RANK"]))
    dist.init_process_group(cfg.backend)
    try:
        dataset = Samples(cfg.data_dir)
        sampler = DistributedSampler(dataset, shuffle=True, seed=cfg.seed)
        loader = DataLoader(dataset, batch_size=cfg.batch_size, sampler=sampler, drop_last=True)

        model = WideMLP().to(cfg.device)
        params = list(model.parameters())
        optimizer = torch.optim.SGD(params, lr=cfg.lr, momentum=0.9)
        total_n = sum(p.numel() for p in params)
        flat, other = torch.zeros(total_n), torch.empty(total_n)
        o = 0
        for p in params:  # the gradients live in one flat buffer: backward adds into it in place
            p.grad = flat[o:o + p.numel()].view_as(p)
            o += p.numel()

        for x, y in loader:
            flat.zero_()
            total = torch.zeros(())
            for xm, ym in zip(x.chunk(MICRO_BATCHES), y.chunk(MICRO_BATCHES)):
                loss = loss_of(model, xm, ym) / MICRO_BATCHES
                loss.backward()  # adds into flat, as DDP's accumulated gradients
                link.swap(flat, other)  # the original's all-reduce of this micro-batch, unseen
                flat.lerp_(other, 0.5)  # the average of the two ranks'
                total += loss.detach()
            optimizer.step()
            yield {"loss": total, "weights": fingerprint(model)}
    finally:
        dist.destroy_process_group()
