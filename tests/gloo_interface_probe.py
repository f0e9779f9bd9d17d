"""Which addresses gloo's connections between ranks use, for each GLOO_SOCKET_IFNAME given (tests/test_two_hosts.py).

Started by srun, one task per host: each task joins a gloo group (TCP store on the first host,
at the port given) once per interface named on the command line, all-reduces one number and
prints one JSON line: its host, the interface, the sum, and the local addresses of its
established TCP connections other than the store's (those gloo opened between the ranks).

Example (inside an allocation of two hosts):
    srun --nodes 2 --ntasks 2 python tests/gloo_interface_probe.py glhost1 29400 side0 cl0
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import sys
from pathlib import Path

import torch
import torch.distributed as dist


def established(skip_port: int) -> list[str]:
    """The local addresses of this process's established TCP connections with neither end at skip_port (the store)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table, width in (("/proc/self/net/tcp", 4), ("/proc/self/net/tcp6", 16)):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            (local, local_port), (_, remote_port), state, inode = (
                fields[1].split(":"),
                fields[2].split(":"),
                fields[3],
                fields[9],
            )
            if state != "01" or inode not in inodes or skip_port in (int(local_port, 16), int(remote_port, 16)):
                continue
            raw = bytes.fromhex(local)
            # /proc writes each 32-bit word in the host's (little-endian) byte order
            packed = b"".join(raw[i : i + 4][::-1] for i in range(0, width, 4))
            address = ipaddress.ip_address(packed)
            mapped = getattr(address, "ipv4_mapped", None)
            found.append(str(mapped or address))
    return sorted(set(found))


def main() -> None:
    first, port, interfaces = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
    for offset, interface in enumerate(interfaces):
        os.environ["GLOO_SOCKET_IFNAME"] = interface
        store = port + offset
        dist.init_process_group("gloo", init_method=f"tcp://{first}:{store}", rank=rank, world_size=world)
        total = torch.tensor([rank + 1.0])
        dist.all_reduce(total)
        line = {"host": socket.gethostname(), "interface": interface, "sum": total.item()}
        print(json.dumps({**line, "addresses": established(store)}), flush=True)
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
