"""Read torch's own min-cut partitioner: its debug log, captured as plain lines.

torch/_functorch/partitioners.py logs why it bans a node from recomputation
(`log.debug("materialized backwards: %s %s", ...)`) and, with `AOT_PARTITIONER_DEBUG=1` in the
environment (`torch._functorch.config.debug_partitioner`), the ops it bans by allowlist and the
tensors it saves. `torch_partitioner_log` turns both on for a block and collects the messages
alone, without the timestamps and process ids torch's handlers print (so a notebook can store
them), and without printing them to stderr.
"""

import contextlib
import io
import logging

import torch._functorch.partitioners as torch_partitioners


@contextlib.contextmanager
def torch_partitioner_log():
    """Yield a list that holds, after the block, the partitioner's debug messages."""
    logger = logging.getLogger(torch_partitioners.__name__)
    stream, lines = io.StringIO(), []
    handler = logging.StreamHandler(stream)
    saved = logger.level, logger.propagate, torch_partitioners.AOT_PARTITIONER_DEBUG
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False  # not to torch's stderr handler
    torch_partitioners.AOT_PARTITIONER_DEBUG = True  # what AOT_PARTITIONER_DEBUG=1 sets
    try:
        yield lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])  # setLevel, not .level: it clears the loggers' level cache
        logger.propagate = saved[1]
        torch_partitioners.AOT_PARTITIONER_DEBUG = saved[2]
        lines += [line for line in stream.getvalue().splitlines() if line.strip()]


def materialized_backwards(lines) -> dict:
    """{node: its readers} from the log's `materialized backwards: node (readers)` lines."""
    found = {}
    for line in lines:
        if line.startswith("materialized backwards: "):
            node, _, readers = line.removeprefix("materialized backwards: ").partition(" ")
            found[node] = readers.strip("(,)").replace(",", "").split()
    return found
