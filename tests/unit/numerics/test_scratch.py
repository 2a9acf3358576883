"""Work buffers reused between sequences (effdepth.numerics.scratch)."""

import copy

import numpy as np
import torch

from effdepth.numerics.scratch import ScratchBuffers
from effdepth.numerics.streams import ViewAccumulator


def test_a_name_reuses_its_storage_until_it_is_too_small_or_of_another_dtype():
    scratch = ScratchBuffers()
    a = scratch.take("x", (4, 5))
    assert scratch.take("x", (2, 10)).data_ptr() == a.data_ptr()
    assert scratch.take("x", (3,)).data_ptr() == a.data_ptr()
    bigger = scratch.take("x", (5, 5))
    assert bigger.shape == (5, 5) and bigger.numel() == 25
    assert scratch.take("x", (5, 5), dtype=torch.float32).dtype == torch.float32
    assert scratch.take("y", (4, 5)).data_ptr() != scratch.take("x", (4, 5)).data_ptr()


def test_release_drops_every_buffer_and_a_copy_gets_none():
    scratch = ScratchBuffers()
    scratch.take("a", (10,))
    assert copy.deepcopy(scratch).names == ()  # a copy of an accumulator gets its own, empty
    scratch.release()
    assert scratch.names == ()


def test_an_accumulator_holds_no_work_buffer_between_batches():
    # Held buffers would add to the next forward pass's peak memory.
    acc = ViewAccumulator(["default"], similarities=("cka",))
    acc.update(torch.randn(4, 2, 9, 6))
    assert acc._scratch.names == ()


class _CountingScratch(ScratchBuffers):
    """Records the storage each take of a name gets."""

    def __init__(self):
        super().__init__()
        self.storage: list = []

    def take(self, name, shape, dtype=torch.float64, device=None):
        out = super().take(name, shape, dtype, device)
        self.storage.append((name, out.untyped_storage().data_ptr()))
        return out


def test_every_sequence_of_a_batch_reuses_the_same_float64_copy():
    # A fresh float64 copy of a sequence per sequence faults in its pages anew each time (a
    # large one comes from mmap): the pool lent to the accumulator serves them all, even while
    # it is empty at the first take.
    scratch = _CountingScratch()
    acc = ViewAccumulator(["default", "token-norm"], similarities=("cka",), scratch=scratch)
    acc.update(torch.randn(4, 3, 9, 6))
    copies = [ptr for name, ptr in scratch.storage if name == "cka-shifted"]
    assert len(copies) == 3 and len(set(copies)) == 1


def test_accumulators_sharing_one_scratch_give_the_numbers_of_separate_ones():
    g = torch.Generator().manual_seed(0)
    a_states = torch.randn(4, 3, 9, 6, generator=g).cumsum(0)
    b_states = torch.randn(4, 2, 7, 6, generator=g).cumsum(0)
    shared = ScratchBuffers()
    pair = [ViewAccumulator(["default", "token-norm+drop-pos0"], similarities=("cka",), scratch=shared) for _ in range(2)]
    alone = [ViewAccumulator(["default", "token-norm+drop-pos0"], similarities=("cka",)) for _ in range(2)]
    for states in (a_states, b_states):  # interleaved: each update overwrites the other's buffer
        for acc, own in zip(pair, alone):
            acc.update(states)
            own.update(states)
            states = states.flip(2)
    for acc, own in zip(pair, alone):
        for view in ("default", "token-norm+drop-pos0"):
            got, want = acc.unit_statistics(view, "cka").arrays, own.unit_statistics(view, "cka").arrays
            for key in want:
                np.testing.assert_array_equal(got[key], want[key])
