"""Models of two GPU kernels' index arithmetic and synchronisation, checked on the CPU (the GPU tests in
tests/kernels decide; these make a wrong mapping or a missing barrier release fail where no GPU is).

1. The FP8 KV decode kernel's MMA fragments read straight from e4m3 tiles (decode_attention.cu,
   warp_mma.cuh: k_frags_e4m3, q_frag_permuted, v_frags_e4m3): with the documented m16n8k16 fragment
   layouts, S = Q K^T and O = P V come out exact, and every shared-memory phase hits distinct banks.
2. The persistent Hopper prefill kernel (prefill_attention_sm90.cu): the zig-zag rounds give every work item
   to one CTA, and the producer / consumer-warpgroup protocol (K/V ring with full and empty barriers, two Q
   buffers, the warpgroups' turn chain) neither deadlocks nor lets a barrier alias phases nor lets a stage or
   Q buffer be overwritten while read, under random interleavings; a model with a release left out fails.
3. The same kernel's key tiles (PrefillItem): they cover every key a query of the item reads, copy no page
   below key 0 or past the keys, take three 64-key tiles for a 24-token item under a 128-key window, and the
   softmax masks every tile where some row must mask a key. The window tile (one 192-key stage, a 144-key
   span per consumer warpgroup): the spans lie in the stage at whole swizzle atoms, hold every key of their
   rows' windows, and under a 128-key window clear of key 0 leave columns 16-127 unmasked in every row.
4. The same kernel's consumer bookkeeping: the edge V rows it zeroes are exactly the keys outside the item's
   range, its online softmax (lazy running max, first P V overwriting O, the sink's term added after it)
   gives the softmax, and the window tile's tensor store writes the rows the 16-byte stores would.
5. The MoE's FP8 1x128 quantizers by rows (moe_activation.cu, the default): each row's groups
   are written exactly once, a group by one aligned half-warp (its amax shuffles stay inside it), every
   thread of a block runs the same rounds, and the columns past k are written as zeros.
"""
import random

import numpy as np
import pytest


# ---------------------------------------------------------------- 1. FP8 decode fragments
# Lane by lane as the CUDA code does it, with the PTX semantics of what it calls: __byte_perm's selector
# nibbles, cvt.rn.f16x2.e4m3x2 (the low byte to the low half), and the m16n8k16 A/B/C fragment layouts. An
# "f16x2 word" is modelled as a (low, high) pair of the values its bytes stand for.
def swz8(r, c):  # warp_mma.cuh: 16-byte chunk c of 64-byte row r (e4m3 tiles)
    return r * 64 + ((c ^ ((r >> 1) & 3)) << 4)


def swz(r, c):  # warp_mma.cuh: 16-byte chunk c of 128-byte row r (the f16 Q tile)
    return r * 128 + ((c ^ (r & 7)) << 4)


def byte_perm(x, y, sel):
    b = [(x >> (8 * i)) & 0xFF for i in range(4)] + [(y >> (8 * i)) & 0xFF for i in range(4)]
    return sum(b[(sel >> (4 * i)) & 7] << (8 * i) for i in range(4))


def e4m3_tile(rows):
    """A 64 x 64 tile of byte codes laid out with swz8 (as load_kv_tile writes it)."""
    tile = np.zeros(64 * 64, np.uint8)
    for r in range(64):
        for c in range(4):
            tile[swz8(r, c):swz8(r, c) + 16] = rows[r, 16 * c:16 * c + 16]
    return tile


def word(tile, off):
    return int.from_bytes(bytes(tile[off:off + 4]), "little")


def mma(C, a, b0, b1):
    """C[lane] += the m16n8k16 product of per-lane fragments: a[lane] four (lo, hi) pairs, b0/b1 one pair."""
    A, B = np.zeros((16, 16)), np.zeros((16, 8))
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        A[g, 2 * t:2 * t + 2], A[g + 8, 2 * t:2 * t + 2] = a[lane][0], a[lane][1]
        A[g, 2 * t + 8:2 * t + 10], A[g + 8, 2 * t + 8:2 * t + 10] = a[lane][2], a[lane][3]
        B[2 * t:2 * t + 2, g], B[2 * t + 8:2 * t + 10, g] = b0[lane], b1[lane]
    D = A @ B
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        C[lane] += [D[g, 2 * t], D[g, 2 * t + 1], D[g + 8, 2 * t], D[g + 8, 2 * t + 1]]


def test_fp8_decode_fragments_give_exact_products_and_conflict_free_reads():
    rng = np.random.default_rng(0)
    K = rng.integers(0, 256, (64, 64)).astype(np.uint8)
    V = rng.integers(0, 256, (64, 64)).astype(np.uint8)
    kt, vt = e4m3_tile(K), e4m3_tile(V)
    value = rng.standard_normal(256)  # what each byte code stands for

    def f16x4(w):  # e4m3x4_to_f16x4: two cvt of the word's low and high halves
        lo, hi = w & 0xFFFF, w >> 16
        return (value[lo & 0xFF], value[lo >> 8]), (value[hi & 0xFF], value[hi >> 8])

    Q = rng.standard_normal((16, 64))
    qword = {}  # the f16 Q tile: byte offset of each 4-byte word -> its (lo, hi) dims
    for r in range(16):
        for c in range(8):
            for w in range(4):
                qword[swz(r, c) + 4 * w] = (Q[r, 8 * c + 2 * w], Q[r, 8 * c + 2 * w + 1])

    def q_frag_permuted(lane):  # per k16 step ks: {lo0[ks], lo1[ks], hi0[ks], hi1[ks]} words
        g, t = lane >> 2, lane & 3
        v4 = lambda off: [qword[off + 4 * i] for i in range(4)]
        lo0, hi0, lo1, hi1 = v4(swz(g, 2 * t)), v4(swz(g, 2 * t + 1)), v4(swz(g + 8, 2 * t)), v4(swz(g + 8, 2 * t + 1))
        return [[lo0[0], lo1[0], lo0[1], lo1[1]], [lo0[2], lo1[2], lo0[3], lo1[3]],
                [hi0[0], hi1[0], hi0[1], hi1[1]], [hi0[2], hi1[2], hi0[3], hi1[3]]]

    def k_frags_e4m3(row, lane):  # one 16-byte read of key row `row`: both b words of all four k16 steps
        off = swz8(row, lane & 3)
        return [f16x4(word(kt, off + 4 * i)) for i in range(4)]

    def v_frags_e4m3(row0, lane):  # 8-byte reads of keys 2t and 2t+1, paired by byte_perm
        g, t = lane >> 2, lane & 3
        odd, col = t & 1, (g & 1) * 8
        xo = swz8(row0 + 2 * t + odd, g >> 1) + col
        yo = swz8(row0 + 2 * t + 1 - odd, g >> 1) + col
        x, y = (word(vt, xo), word(vt, xo + 4)), (word(vt, yo), word(vt, yo + 4))
        s01, s23 = (0x1504, 0x3726) if odd else (0x5140, 0x7362)
        p = [byte_perm(x[0], y[0], s01), byte_perm(x[0], y[0], s23), byte_perm(x[1], y[1], s01),
             byte_perm(x[1], y[1], s23)]
        return [half for w in p for half in f16x4(w)]  # b[dt] for n-blocks dt = 0..7

    for warp in range(4):
        qa = [q_frag_permuted(lane) for lane in range(32)]
        S = np.zeros((2, 32, 4))
        for nt in range(2):
            kf = [k_frags_e4m3(warp * 16 + nt * 8 + (lane >> 2), lane) for lane in range(32)]
            for ks in range(4):
                mma(S[nt], [qa[lane][ks] for lane in range(32)], [kf[lane][ks][0] for lane in range(32)],
                    [kf[lane][ks][1] for lane in range(32)])
        s_ref = Q @ value[K[warp * 16:warp * 16 + 16]].T
        for nt in range(2):
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                for e in range(4):  # C layout: row g + 8 (e >> 1), key nt * 8 + 2t + (e & 1)
                    assert abs(S[nt][lane][e] - s_ref[g + 8 * (e >> 1), nt * 8 + 2 * t + (e & 1)]) < 1e-9
        # O = P V: P packed from the C layout as the kernel does, then the combine's float4 stores put each
        # lane's outputs back in dim order.
        P = rng.standard_normal((16, 16))
        pa = []
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            sv = [[P[g + 8 * (e >> 1), nt * 8 + 2 * t + (e & 1)] for e in range(4)] for nt in range(2)]
            pa.append([(sv[0][0], sv[0][1]), (sv[0][2], sv[0][3]), (sv[1][0], sv[1][1]), (sv[1][2], sv[1][3])])
        vf0 = [v_frags_e4m3(warp * 16, lane) for lane in range(32)]
        vf1 = [v_frags_e4m3(warp * 16 + 8, lane) for lane in range(32)]
        o = np.zeros((8, 32, 4))
        for dt in range(8):
            mma(o[dt], pa, [vf0[lane][dt] for lane in range(32)], [vf1[lane][dt] for lane in range(32)])
        O = np.full((16, 64), np.nan)
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            for h in range(2):
                for e in range(2):
                    d = 16 * t + 8 * e
                    O[h * 8 + g, d:d + 8] = [o[dt][lane][2 * h + e] for dt in range(8)]
        np.testing.assert_allclose(O, P @ value[V[warp * 16:warp * 16 + 16]], atol=1e-9)
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
        # The GPU compares only the parity of the phase: a wait answers as the model does only while the
        # barrier has completed `phase` or `phase + 1` phases. Two behind, the parities alias (it would
        # block); one ahead, the phase before is still open and its parity differs (it would pass at once).
        assert self.done <= phase + 1, f"parity aliasing: waiting for phase {phase}, {self.done} completed"
        assert self.done >= phase, f"early wait: for phase {phase} with {self.done} completed passes at once"
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


# ---------------------------------------------------------------- 3. prefill key tiles
def prefill_item(p_first, n_tok, window, page, block_n):  # PrefillItem::of, C++ integer arithmetic
    kv_begin = max(0, p_first - window + 1) if window > 0 else 0
    kv_end = p_first + n_tok
    align = min(page, block_n) if window > 0 else block_n
    key_top = (kv_end + align - 1) // align * align
    n_tiles = (key_top - kv_begin // align * align + block_n - 1) // block_n
    return kv_begin, kv_end, key_top, n_tiles


def need_mask(k0, p_first, p_last, window, block_n):  # the consumer's softmax
    return (k0 + block_n - 1 > p_first) or (window > 0 and k0 < max(0, p_last - window + 1))


@pytest.mark.parametrize("window", [0, 1, 33, 128])
@pytest.mark.parametrize("page", [16, 32, 64])
def test_prefill_key_tiles_cover_the_keys_and_mask_where_needed(window, page):
    block_n = 64 if 0 < window <= 256 else 128
    box_rows = min(page, block_n)
    for tokens in (16, 24):
        for p_first in range(0, 420, 1 if window else 7):
            for n_tok in {1, 7, tokens}:
                kv_begin, kv_end, key_top, n_tiles = prefill_item(p_first, n_tok, window, page, block_n)
                p_last = kv_end - 1
                covered = set()
                for t in range(n_tiles):
                    k0 = key_top - (t + 1) * block_n
                    for lane in range(block_n // box_rows):  # the producer's box_page
                        t0 = k0 + lane * box_rows
                        if t0 + box_rows <= kv_begin or t0 >= kv_end:
                            continue
                        assert t0 >= 0 and t0 % page + box_rows <= page  # a whole box of one page
                        covered.update(range(t0, t0 + box_rows))
                    row_keys = [(max(0, pos - window + 1) if window else 0, pos) for pos in range(p_first, kv_end)]
                    some_row_masks = any(not (lo <= key <= hi) for lo, hi in row_keys for key in range(k0, k0 + block_n))
                    if some_row_masks:
                        assert need_mask(k0, p_first, p_last, window, block_n), (p_first, n_tok, t)
                assert set(range(kv_begin, kv_end)) <= covered
                assert key_top - n_tiles * block_n <= kv_begin < key_top - (n_tiles - 1) * block_n  # no idle tile
                if window == 128 and n_tok == tokens == 24 and page == 16:
                    assert n_tiles <= 3


# The window tile (8 query heads a KV head, windows of at most 128 keys): PrefillItem::window_key0 and its
# key_top, the producer's 16-row boxes, and the consumer's edges_only mask.
WINDOW_TILE_KEYS, WINDOW_STAGE_KEYS = 144, 192


def window_key0(p_first, c, window):  # rounds toward -inf like the C++ `& ~7` on a two's-complement int
    return (p_first + 8 * c - window + 1) & ~7


def window_tile_violations(window, page, tokens, p_first, n_tok, edges_only_needs_key0=True):
    """What the kernel assumes of one window-tile item that does not hold (empty: all of it holds)."""
    bad = []
    kv_begin = max(0, p_first - window + 1)
    kv_end = p_first + n_tok
    key_top = (window_key0(p_first, 0, window) & ~15) + WINDOW_STAGE_KEYS
    stage0 = key_top - WINDOW_STAGE_KEYS
    box_rows = min(page, 16)
    covered = set()
    for lane in range(WINDOW_STAGE_KEYS // box_rows):
        assert lane < 32  # one box a lane of the producer warp
        t0 = stage0 + lane * box_rows
        if t0 + box_rows <= kv_begin or t0 >= kv_end:
            continue
        if t0 < 0 or t0 % page + box_rows > page:
            bad.append(("box", t0))
        covered.update(range(t0, t0 + box_rows))
    if not set(range(kv_begin, kv_end)) <= covered:
        bad.append(("uncopied keys", p_first, n_tok))
    for c in range(tokens // 8):  # consumer warpgroup c: tokens 8c .. 8c + 7
        wk0 = window_key0(p_first, c, window)
        if not (stage0 <= wk0 and wk0 + WINDOW_TILE_KEYS <= key_top and (wk0 - stage0) % 8 == 0):
            bad.append(("span outside the stage", c))
        for j in range(8 * c, min(8 * c + 8, n_tok)):
            pos = p_first + j
            lo = max(0, pos - window + 1)
            if not (wk0 <= lo and pos < wk0 + WINDOW_TILE_KEYS):
                bad.append(("row's keys outside the span", c, j))
            edges_only = window == 128 and (wk0 >= 0 or not edges_only_needs_key0)
            if edges_only and not (lo - wk0 <= 16 and pos - wk0 >= 127):
                bad.append(("masked key in columns 16-127", c, j))
    return bad


@pytest.mark.parametrize("window", [1, 33, 128])
@pytest.mark.parametrize("page", [8, 16, 32, 64])
def test_window_tile_spans_hold_their_rows_keys(window, page):
    for tokens in (16, 24):
        for p_first in range(0, 700):
            for n_tok in {1, 7, 9, tokens}:
                assert window_tile_violations(window, page, tokens, p_first, n_tok) == [], (p_first, n_tok)


def test_window_tile_edges_only_mask_needs_the_span_clear_of_key_0():
    # Near a sequence's start the rows' window starts are clamped to key 0: columns 16-127 hold masked keys
    # there, which is why the kernel masks every column when the warpgroup's span starts below key 0.
    found = [p for p in range(0, 200) if window_tile_violations(128, 16, 24, p, 24, edges_only_needs_key0=False)]
    assert found and max(found) < 127 + 8


# ---------------------------------------------------------------- 4. The consumer's per-item bookkeeping
# prefill_attention_sm90.cu's fix_edge_v (the V rows of keys outside [kv_begin, kv_end) zeroed before P V),
# its online softmax (the running max moving only past kMaxSlack; the item's first P V overwriting O, the
# sink's term added after it) and the window tile's output by tensor stores.
def edge_v_chunks(k0, kv_begin, kv_end, block_n):
    """The 16-byte chunks (row, chunk) the warpgroup's 128 threads zero, as fix_edge_v visits them."""
    lo = min(max(kv_begin - k0, 0), block_n)
    hi = max(min(kv_end - k0, block_n), lo)
    if lo == 0 and hi == block_n:
        return None  # the early return: no barrier, nothing written
    visited = []
    for ctid in range(128):
        visited += [divmod(i, 8) for i in range(ctid, lo * 8, 128)]
        visited += [divmod(i, 8) for i in range(hi * 8 + ctid, block_n * 8, 128)]
    return visited


@pytest.mark.parametrize("block_n", [64, 128, 144])
def test_edge_v_rows_are_the_keys_outside_the_range(block_n):
    rng = random.Random(block_n)
    cases = [(rng.randrange(-300, 300), rng.randrange(-50, 400), rng.randrange(0, 500)) for _ in range(3000)]
    cases += [(0, 0, block_n), (5, 0, 1000), (-8, 0, 1000), (0, 7, 7), (100, 0, 50), (0, 200, 300)]
    for k0, kv_begin, extent in cases:
        kv_end = kv_begin + extent
        outside = {t - k0 for t in range(k0, k0 + block_n) if t < kv_begin or t >= kv_end}
        visited = edge_v_chunks(k0, kv_begin, kv_end, block_n)
        if visited is None:
            assert not outside
            continue
        assert len(visited) == len(set(visited))  # every chunk once
        assert set(visited) == {(r, c) for r in outside for c in range(8)}, (k0, kv_begin, kv_end)


def bf16(x):
    """Round float32 values to bfloat16 (nearest, ties to even), back as float32."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def consumer_softmax(scores, v, sink, block_n, slack):
    """One row's attention as a consumer warpgroup computes it: key tiles from the top down, the running max
    starting at the sink, moved only when a tile's max passes it by more than `slack`, probabilities rounded
    to bf16 for both P V and the row sum (the tensor cores' ones columns), the first P V overwriting O and the
    sink's term added after it. Returns (out, rescales, largest probability)."""
    scale_log2 = 1.0  # scores already in the log2 domain
    n = len(scores)
    tiles = [(max(0, n - (t + 1) * block_n), n - t * block_n) for t in range((n + block_n - 1) // block_n)]
    m_run = np.float32(sink) if sink is not None else np.float32(-np.inf)
    sink_l = np.float32(1.0 if sink is not None else 0.0)
    o, rescales, p_max = None, 0, 0.0
    for t, (a, b) in enumerate(tiles):
        s = scores[a:b].astype(np.float32)
        m_new = max(m_run, np.float32(np.max(s) * scale_log2))
        moves = m_new > m_run + slack
        m_keep = m_new if moves else m_run
        m_use = np.float32(0.0) if m_keep == -np.inf else m_keep
        alpha = np.float32(np.exp2(m_run - m_use)) if moves else np.float32(1.0)
        m_run = m_keep
        p = bf16(np.exp2(s * scale_log2 - m_use))
        p_max = max(p_max, float(np.max(p)))
        if t == 0:
            sink_l *= alpha  # no O yet
        elif alpha != 1.0:
            o *= alpha
            rescales += 1
        pv = np.concatenate([p @ v[a:b], [np.sum(p, dtype=np.float32)]]).astype(np.float32)
        o = pv if o is None else o + pv  # the first P V overwrites
        if t == 0:
            o[-1] += sink_l
    l = o[-1]
    return (o[:-1] / l if l > 0 else o[:-1] * 0), rescales, p_max


def exact_attention(scores, v, sink):
    logits = np.concatenate([scores.astype(np.float64), [sink] if sink is not None else []])
    keep = np.isfinite(logits)
    if not keep.any():
        return np.zeros(v.shape[1])
    w = np.where(keep, np.exp2(logits - np.max(logits[keep])), 0.0)
    return (w[: len(scores)] @ v.astype(np.float64)) / np.sum(w)


@pytest.mark.parametrize("sink", [None, 0.0, 6.0, -30.0])
def test_lazy_running_max_gives_the_softmax(sink):
    rng = np.random.default_rng(7)
    block_n = 128
    for trial in range(60):
        n = int(rng.integers(1, 700))
        spread = [1.0, 4.0, 30.0][trial % 3]
        scores = (rng.standard_normal(n) * spread).astype(np.float32)
        if trial % 4 == 1:  # a drift: the max grows tile after tile, past the slack each time
            scores += np.linspace(0, 60, n, dtype=np.float32)[::-1].copy()
        if trial % 5 == 2:  # causal / window masks: -inf keys, a tile of them entirely
            scores[rng.random(n) < 0.3] = -np.inf
            scores[: min(n, 130)] = -np.inf
        v = rng.standard_normal((n, 64)).astype(np.float32)
        want = exact_attention(scores, v, sink)
        lazy, lazy_rescales, p_max = consumer_softmax(scores, v, sink, block_n, 8.0)
        eager, eager_rescales, _ = consumer_softmax(scores, v, sink, block_n, 0.0)
        scale = max(1.0, float(np.max(np.abs(want))))
        assert np.max(np.abs(lazy - want)) <= 2e-2 * scale, (trial, n)
        assert np.max(np.abs(eager - want)) <= 2e-2 * scale, (trial, n)
        assert p_max <= 2.0 ** 8  # probabilities stay within 2^kMaxSlack
        assert lazy_rescales <= eager_rescales


def test_lazy_running_max_skips_most_rescales_of_a_long_row():
    rng = np.random.default_rng(3)
    scores = rng.standard_normal(32768).astype(np.float32) * 2.0
    v = rng.standard_normal((32768, 64)).astype(np.float32)
    _, lazy, _ = consumer_softmax(scores, v, 0.0, 128, 8.0)
    _, eager, _ = consumer_softmax(scores, v, 0.0, 128, 0.0)
    assert lazy <= 1 < eager


def test_window_tma_store_box_is_the_warps_staged_rows():
    # (And the window tile's 16-byte stores by rounds of 2 x 4 heads are the same rows.)
    # Consumer warp (cw, warp_in) stages rows r = 64 cw + 16 warp_in + i (i < 16) of its item, row r being
    # (token r / 8, head r % 8); the 16-byte stores write row r to out row (tok0 + r / 8) * hq + 8 kvh + r % 8.
    # The tensor store writes the box {64, 8, 2} at (0, 8 kvh, tok0 + warp_tok) from the staged buffer at row
    # 64 cw + 16 warp_in: box element (head h, token j) is staged row 16 warp_in + 64 cw + 8 j + h.
    hq, kvh, tok0 = 64, 5, 1000
    for cw in range(3):
        for warp_in in range(4):
            base = 64 * cw + 16 * warp_in
            warp_tok = base // 8
            for n_tok in range(1, 25):
                by_stores = {}
                for i in range(16):
                    r = base + i
                    if r < n_tok * 8:
                        by_stores[(tok0 + r // 8) * hq + 8 * kvh + r % 8] = r
                by_rounds = {}  # the window tile's 16-byte stores: round i, lane l (sub = l // 8)
                for i in range(4):
                    for sub in range(4):
                        if warp_tok + (i >> 1) < n_tok:
                            out_row = (tok0 + warp_tok + (i >> 1)) * hq + 8 * kvh + sub + 4 * (i & 1)
                            by_rounds[out_row] = base + 4 * i + sub
                assert by_rounds == by_stores
                if warp_tok + 1 < n_tok:  # the kernel's condition for the tensor store
                    by_box = {(tok0 + warp_tok + j) * hq + 8 * kvh + h: base + 8 * j + h
                              for j in range(2) for h in range(8)}
                    assert by_box == by_stores  # the same rows, all of them real
                else:
                    assert len(by_stores) < 16  # a partial token: the box would write past the item


# ---------------------------------------------------------------- 5. FP8 quantizers by rows
def quant_block(groups):  # moe_activation.cu
    return min(512, (groups * 16 + 31) // 32 * 32)


def quant_rows_writes(k, groups, block, loads_per_col):
    """(group -> 16 thread ids, column -> 'value' | 'zero', thread -> rounds) of one row as the kernel runs it;
    `loads_per_col` names what the thread's 8 columns read (the 8-wide or 4-wide load, or nothing)."""
    rounds = (groups * 16 + block - 1) // block
    group_threads, cols, thread_rounds = {}, {}, {}
    for tid in range(block):
        thread_rounds[tid] = rounds
        sub = tid & 15
        for rnd in range(rounds):
            g = (rnd * block + tid) >> 4
            col = g * 128 + sub * 8
            if g >= groups:  # takes part in the shuffles, stores nothing
                continue
            group_threads.setdefault(g, []).append(rnd * block + tid)
            if col < k:  # the launcher takes this kernel for k % 8 == 0 only
                assert col + 8 <= k, (k, col)
                kinds = ["value"] * 8
            else:
                kinds = ["zero"] * 8
            for i, kind in enumerate(kinds):
                assert col + i not in cols, "column written twice"
                cols[col + i] = kind
            loads_per_col.append((col, kinds.count("value")))
    return group_threads, cols, thread_rounds


@pytest.mark.parametrize("k", [8, 64, 120, 128, 136, 2880, 4096, 8192 + 8, 20000])
def test_quantizers_by_rows_write_each_column_once_a_group_by_one_half_warp(k):
    groups = (k + 127) // 128
    block = quant_block(groups)
    assert block % 32 == 0 and 32 <= block <= 512
    loads = []
    group_threads, cols, thread_rounds = quant_rows_writes(k, groups, block, loads)
    assert sorted(cols) == list(range(groups * 128))  # every column of the padded row, once
    assert all(cols[c] == ("value" if c < k else "zero") for c in cols)
    assert sorted(group_threads) == list(range(groups))
    for g, ids in group_threads.items():
        assert len(ids) == 16 and ids == list(range(ids[0], ids[0] + 16)) and ids[0] % 16 == 0
    assert len(set(thread_rounds.values())) == 1  # uniform rounds: whole warps reach every shuffle
    # The 16-byte loads are aligned: rows of k % 8 == 0 bf16 start on 16 bytes, and every col % 8 == 0.
    assert all(col % 8 == 0 for col, _ in loads)


def test_the_model_refuses_rows_that_are_not_whole_16_byte_loads():
    with pytest.raises(AssertionError):
        quant_rows_writes(2884, 23, quant_block(23), [])

