"""torchrun (python3 -m torch.distributed.run) with its Python 3.11 fault fixed, for Debian 12.

Debian 12's python3-torch 1.13 runs on Python 3.11, where iterating an IntFlag no longer yields
its zero member: torch's Std.from_str("0") (the default of --redirects and --tee) returns None and
every torchrun dies in to_map() with "'NoneType' object has no attribute 'get'". This module
replaces Std.from_str with one that looks values up among all members, then runs torch's own
launcher unchanged:

    python3 -m zipccl.torchrun --standalone --nproc_per_node 4 train.py

Where torch's from_str works (other versions), nothing is replaced.
"""
import re

from torch.distributed.elastic.multiprocessing import api as _api


def _from_str(vm):
    members = {int(s): s for s in _api.Std.__members__.values()}
    if re.match(_api._VALUE_REGEX, vm):
        return members[int(vm)]
    if re.match(_api._MAPPING_REGEX, vm):
        return {int(i): members[int(v)] for i, v in (m.split(':') for m in vm.split(','))}
    raise ValueError(f'{vm} does not match: <{_api._VALUE_REGEX}> or <{_api._MAPPING_REGEX}>')


def patch():
    """Fixes Std.from_str where it is broken; True if it was."""
    if _api.Std.from_str('0') is None:
        _api.Std.from_str = staticmethod(_from_str)
        return True
    return False


def main():
    patch()
    from torch.distributed import run
    run.main()


if __name__ == '__main__':
    main()
