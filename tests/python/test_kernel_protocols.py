"""Models of two GPU kernels' index arithmetic and synchronisation, checked on the CPU (the GPU tests in
tests/kernels decide; these make a wrong mapping or a missing barrier release fail where no GPU is).

1. The FP8 KV decode kernel's MMA fragments read straight from e4m3 tiles (decode_attention.cu,
   warp_mma.cuh: k_frags_e4m3, q_frag_permuted, v_frags_e4m3): with the documented m16n8k16 fragment
   layouts, S = Q K^T and O = P V come out exact, and every shared-memory phase hits distinct banks.
2. The persistent Hopper prefill kernel (prefill_attention_sm90.cu): the zig-zag rounds give every work item
   to one CTA, and the producer / consumer-warpgroup protocol (K/V ring with full and empty barriers, two Q
   buffers, the warpgroups' turn chain) neither deadlocks nor lets a barrier alias phases nor lets a stage or
   Q buffer be overwritten while read, under random interleavings; a model with a release left out fails.
"""
import random

import numpy as np
import pytest


# ---------------------------------------------------------------- 1. FP8 decode fragments
def swz8(r, c):  # warp_mma.cuh: 16-byte chunk c of 64-byte row r
    return r * 64 + ((c ^ ((r >> 1) & 3)) << 4)


def e4m3_tile(rows):
    """A 64 x 64 tile of byte codes laid out with swz8, and the codes as a matrix."""
    tile = np.zeros(64 * 64, np.uint8)
    for r in range(64):
        for c in range(4):
            tile[swz8(r, c):swz8(r, c) + 16] = rows[r, 16 * c:16 * c + 16]
    return tile


def test_fp8_decode_fragments_give_exact_products_and_conflict_free_reads():
    rng = np.random.default_rng(0)
    K = rng.integers(0, 256, (64, 64)).astype(np.uint8)
    V = rng.integers(0, 256, (64, 64)).astype(np.uint8)
    kt, vt = e4m3_tile(K), e4m3_tile(V)
    value = rng.standard_normal(256)  # what each byte code stands for
    Q = rng.standard_normal((16, 64))
    P = rng.standard_normal((16, 16))
    for warp in range(4):
        # S: for each 8-key block nt and k16 step ks, B[k][n] from lane (g, t)'s 16-byte read of key row g.
        S = np.zeros((16, 16))
        for nt in range(2):
            for ks in range(4):
                A, B = np.zeros((16, 16)), np.zeros((16, 8))
                for lane in range(32):
                    g, t = lane >> 2, lane & 3
                    off = swz8(warp * 16 + nt * 8 + g, t)
                    w = kt[off + 4 * ks:off + 4 * ks + 4]
                    B[2 * t, g], B[2 * t + 1, g], B[2 * t + 8, g], B[2 * t + 9, g] = value[w]
                    for r in (g, g + 8):  # q_frag_permuted: the same dims of Q
                        A[r, 2 * t:2 * t + 2] = Q[r, 16 * t + 4 * ks:16 * t + 4 * ks + 2]
                        A[r, 2 * t + 8:2 * t + 10] = Q[r, 16 * t + 4 * ks + 2:16 * t + 4 * ks + 4]
                S[:, nt * 8:nt * 8 + 8] += A @ B
        np.testing.assert_allclose(S, Q @ value[K[warp * 16:warp * 16 + 16]].T, atol=1e-12)
        # O: n-block dt's column g is dim 8g + dt; lane (g, t) pairs its two keys' bytes per dim.
        O = np.zeros((16, 64))
        for dt in range(8):
            B = np.zeros((16, 8))
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                odd = t & 1
                for half in range(2):
                    row0, col = warp * 16 + 8 * half, (g & 1) * 8
                    x = vt[swz8(row0 + 2 * t + odd, g >> 1) + col:][:8]
                    y = vt[swz8(row0 + 2 * t + 1 - odd, g >> 1) + col:][:8]
                    key_2t, key_2t1 = (y, x) if odd else (x, y)
                    B[8 * half + 2 * t, g] = value[key_2t[dt]]
                    B[8 * half + 2 * t + 1, g] = value[key_2t1[dt]]
            C = P @ B
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                for e in range(2):
                    for r in (g, g + 8):
                        O[r, 8 * (2 * t + e) + dt] = C[r, 2 * t + e]  # what the combine puts back
        np.testing.assert_allclose(O, P @ value[V[warp * 16:warp * 16 + 16]], atol=1e-12)
        # Banks: K's 16-byte reads in quarter-warp phases, V's 8-byte reads in half-warp phases.
        for nt in range(2):
            for q in range(4):
                banks = [(swz8(warp * 16 + nt * 8 + (l >> 2), l & 3) // 4 + i) % 32
                         for l in range(8 * q, 8 * q + 8) for i in range(4)]
                assert len(set(banks)) == 32
        for half in range(2):
            for which in range(2):
                for hw in range(2):
                    banks = []
                    for l in range(16 * hw, 16 * hw + 16):
                        g, t = l >> 2, l & 3
                        odd = t & 1
                        r = warp * 16 + 8 * half + 2 * t + (odd if which == 0 else 1 - odd)
                        off = swz8(r, g >> 1) + (g & 1) * 8
                        banks += [(off // 4) % 32, (off // 4 + 1) % 32]
                    assert len(set(banks)) == 32


# ---------------------------------------------------------------- 2. persistent prefill
def round_item(r, b, grid):
    return r * grid + ((grid - 1 - b) if r & 1 else b)


def items_of(b, grid, items):
    out, r = [], 0
    while round_item(r, b, grid) < items:
        out.append(round_item(r, b, grid))
        r += 1
    return out


def test_zig_zag_rounds_give_every_item_to_one_cta():
    for grid in range(1, 40):
        for items in range(grid, 200):
            seen = sorted(w for b in range(grid) for w in items_of(b, grid, items))
            assert seen == list(range(items)), (grid, items)


class MBar:  # an mbarrier: phases complete after `count` arrivals; waits name the phase they expect
    def __init__(self, count):
        self.count, self.arrived, self.done = count, 0, 0

    def arrive(self):
        self.arrived += 1
        if self.arrived == self.count:
            self.arrived, self.done = 0, self.done + 1

    def ready(self, phase):
        assert self.done <= phase + 1, f"parity aliasing: waiting for phase {phase}, {self.done} completed"
        return self.done > phase


class Named:  # a named barrier between a warpgroup (sync) and its predecessor (arrive)
    def __init__(self):
        self.pending = 0

    def arrive(self):
        self.pending += 1
        assert self.pending <= 1, "named barrier arrivals stacked"


def run_cta(ntiles, grid, b, stages, consumers, rng, leave_out=None):
    items = len(ntiles)
    full = [MBar(1) for _ in range(stages)]
    empty = [MBar(consumers) for _ in range(stages)]
    q_full, q_empty = [MBar(1), MBar(1)], [MBar(consumers), MBar(consumers)]
    stage_tile, q_buf = [None] * stages, [None, None]
    turn = [Named() for _ in range(consumers)]

    def producer():
        g, k = 0, 0
        while round_item(k, b, grid) < items:
            w, qb = round_item(k, b, grid), k & 1
            if k >= 2 and leave_out != "q_empty wait":
                while not q_empty[qb].ready((k >> 1) - 1):
                    yield
            q_buf[qb] = w
            q_full[qb].arrive()
            for t in range(ntiles[w]):
                st = g % stages
                if g >= stages:
                    while not empty[st].ready(g // stages - 1):
                        yield
                stage_tile[st] = (w, t)
                full[st].arrive()
                g += 1
                yield
            k += 1

    def consumer(cw):
        def turn_wait():
            while not turn[cw].pending:
                yield
            turn[cw].pending -= 1

        def turn_pass(cta_last_event):
            if not (cta_last_event and cw == consumers - 1):
                turn[(cw + 1) % consumers].arrive()

        if cw == consumers - 1:
            turn[0].arrive()
        g0, k = 0, 0
        while round_item(k, b, grid) < items:
            w, qb = round_item(k, b, grid), k & 1
            n, last_item = ntiles[w], round_item(k + 1, b, grid) >= items
            st = lambda t: (g0 + t) % stages  # noqa: E731
            ph = lambda t: (g0 + t) // stages  # noqa: E731
            while not q_full[qb].ready(k >> 1):
                yield
            assert q_buf[qb] == w, "Q buffer overwritten while in use"
            for t in range(n):
                while not full[st(t)].ready(ph(t)):
                    yield
                yield from turn_wait()
                assert stage_tile[st(t)] == (w, t), "stage overwritten before it was read"
                if t > 0:
                    assert stage_tile[st(t - 1)] == (w, t - 1), "stage overwritten during its P V"
                turn_pass(False)
                yield
                if t > 0:
                    empty[st(t - 1)].arrive()
            yield from turn_wait()  # the last tile's P V
            assert stage_tile[st(n - 1)] == (w, n - 1)
            turn_pass(last_item)
            yield
            if leave_out != "last stage release":
                empty[st(n - 1)].arrive()
            assert q_buf[qb] == w, "Q buffer overwritten before the output was staged"
            q_empty[qb].arrive()
            g0, k = g0 + n, k + 1

    gens = [producer()] + [consumer(c) for c in range(consumers)]
    alive, steps = list(range(len(gens))), 0
    while alive:
        i = rng.choice(alive)
        try:
            next(gens[i])
        except StopIteration:
            alive.remove(i)
        steps += 1
        assert steps < 200000, "deadlock"
    assert all(t.pending == 0 for t in turn), "turn arrivals left over"


def random_ctas(trials, leave_out=None):
    rng = random.Random(1)
    for _ in range(trials):
        grid = rng.randint(1, 6)
        ntiles = [rng.randint(1, 9) for _ in range(rng.randint(grid, 25))]
        stages, consumers = rng.choice([3, 4]), rng.choice([2, 3])
        for b in range(grid):
            run_cta(ntiles, grid, b, stages, consumers, rng, leave_out)


def test_persistent_prefill_protocol_under_random_interleavings():
    random_ctas(300)


@pytest.mark.parametrize("leave_out", ["last stage release", "q_empty wait"])
def test_the_protocol_model_fails_without_a_release_or_a_wait(leave_out):
    with pytest.raises(AssertionError):
        random_ctas(300, leave_out)
