"""KV-cache storage formats (the KV half of quant/formats.py's statement).

int8 (`--kv-bits 8`): per (position, kv head) one row of head_dim int8
values and one float32 scale, rounding as exact.quantize_rows_i8.

int4 (`--kv-bits 4`): per (position, kv head) head_dim int4 values in
[-7, 7], packed two per byte, element 2j in the LOW nibble of byte j (the
weights' order), and one float32 scale per group of `group` consecutive
elements along head_dim (exact.quantize_rows_i4).  The group is the largest
divisor of head_dim that is <= 32, so groups never straddle heads and a
scale costs at most a quarter of the bits it describes in the common
head_dim=64/128 case.

Hadamard-rotated keys (--kv-rotate) take group scales clipped where that
lowers the group's squared error (exact.quantize_rows_i4_clip: max|x| times
1, 0.95, 0.9, 0.85 or 0.8); unrotated keys and all values take max|x| / 7
(clipping unrotated keys cuts the few large channels the scores rest on:
measured worse, docs/numerics.md).  The layout is the same either way.

Layout of one layer's cache (C: tllm_kv4_layer):
    k, v        uint8  [max_seq][n_kv_heads][head_dim / 2]
    k_scale, v_scale float [max_seq][n_kv_heads][head_dim / group]

int8 K, int4 V (`--kv-bits 8:4`): K exactly as the int8 cache stores it, V
exactly as the int4 cache stores its V (C: tllm_kv8v4_layer).  The keys set
the softmax's shape, where int4 costs most; the values are averaged by it,
where int4 costs little.  K is int8, so no rotation applies.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import UserError

KV4_GROUP_MAX = 32


@dataclass(frozen=True)
class KVBits:
    """The KV cache's precision: bits of K and of V (8/8, 4/4 or 8/4).

    A uniform cache compares equal to its one number (KVBits(8, 8) == 8) and
    hashes like it, so `kv_bits == 4` reads as before wherever both halves
    are meant; code that must tell K from V reads .k and .v."""

    k: int
    v: int

    def __str__(self) -> str:  # the option's own spelling: "8", "4", "8:4"
        return str(self.k) if self.uniform else f"{self.k}:{self.v}"

    @property
    def uniform(self) -> bool:
        return self.k == self.v

    @property
    def mixed(self) -> bool:
        return not self.uniform

    def json_value(self) -> int | str:
        """Manifests and reports: 8 or 4 as before, "8:4" for the mixed cache."""
        return self.k if self.uniform else str(self)

    def describe(self) -> str:
        """For sentences: "int8", "int4", "int8 K / int4 V"."""
        return f"int{self.k}" if self.uniform else f"int{self.k} K / int{self.v} V"

    def __eq__(self, other) -> bool:
        if isinstance(other, KVBits):
            return (self.k, self.v) == (other.k, other.v)
        if isinstance(other, int) and not isinstance(other, bool):
            return self.uniform and self.k == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.k) if self.uniform else hash((self.k, self.v))


KV8, KV4, KV8V4 = KVBits(8, 8), KVBits(4, 4), KVBits(8, 4)
KV_BITS_CHOICES = ("8", "4", "8:4")  # the --kv-bits spellings, in the order help and errors list them
_BY_SPELLING = {"8": KV8, "4": KV4, "8:4": KV8V4}


def parse_kv_bits(value) -> KVBits:
    """--kv-bits as typed data: "8", "4", "8:4" (or 8, 4, a KVBits, a
    manifest's value); anything else is a one-line error naming the choices."""
    if isinstance(value, KVBits):
        return value
    key = str(value).strip() if isinstance(value, (str, int)) and not isinstance(value, bool) else None
    if key not in _BY_SPELLING:
        raise UserError(f"--kv-bits {value} is not supported: choose one of {', '.join(KV_BITS_CHOICES)}")
    return _BY_SPELLING[key]

# --kv-rotate: Hadamard rotation of each head's k (after RoPE) and q before
# the int4 cache quantizes them (tllm_attention_kv4_hadamard).  The rotation
# spreads a few large channels over the whole head, so one outlier no longer
# sets the scale of its group; the scores are unchanged in exact arithmetic.
# "auto": on for int4 KV where head_dim is a power of two; the int8 cache is
# never rotated (its one scale per row loses little, docs/numerics.md).
KV_ROTATIONS = ("auto", "hadamard", "off")


def kv4_group(head_dim: int) -> int:
    return max(d for d in range(1, min(head_dim, KV4_GROUP_MAX) + 1) if head_dim % d == 0)


@dataclass(frozen=True)
class KVLayout:
    bits: int
    ctype: str  # element type of the value buffer
    bytes_per_pos: int  # value bytes of one position (all kv heads)
    scales_per_pos: int  # float32 scales of one position (all kv heads)
    group: int  # elements per scale


def kv_layout(config, bits: int) -> KVLayout:
    """The layout of one half (K or V) of a cache of `bits` bits."""
    hd, nkv = config.head_dim, config.n_kv_heads
    if bits == 8:
        return KVLayout(8, "int8_t", nkv * hd, nkv, hd)
    if bits == 4:
        assert hd % 2 == 0, "int4 KV packs head_dim in pairs (RoPE already needs an even head_dim)"
        g = kv4_group(hd)
        return KVLayout(4, "uint8_t", nkv * hd // 2, nkv * (hd // g), g)
    raise AssertionError(f"no KV layout for {bits} bits")


def kv_layouts(config, kv: KVBits) -> tuple[KVLayout, KVLayout]:
    """The K and V layouts of a cache (the same for a uniform one)."""
    kv = parse_kv_bits(kv)
    return kv_layout(config, kv.k), kv_layout(config, kv.v)


def kv_bytes_per_token(config, kv: KVBits) -> int:
    """K and V, values and scales, all layers: the cost of one more token of context."""
    k, v = kv_layouts(config, kv)
    return config.n_layers * (k.bytes_per_pos + 4 * k.scales_per_pos + v.bytes_per_pos + 4 * v.scales_per_pos)


def is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def kv_rotation(mode: str, bits, head_dim: int) -> str:
    """The rotation a build uses: "hadamard" or "off" (what the manifest,
    plan and report say).  "hadamard" asked for where it cannot apply is a
    one-line error; "auto" falls back to "off" (kv_rotation_note says why)."""
    if mode not in KV_ROTATIONS:
        raise UserError(f"--kv-rotate {mode} is not known: choose one of {', '.join(KV_ROTATIONS)}")
    if mode == "off":
        return "off"
    bits = parse_kv_bits(bits)
    if mode == "hadamard" and bits != 4:  # the rotation is of int4 keys: 8:4 keeps its keys int8
        raise UserError(f"--kv-rotate hadamard rotates the int4 KV cache, and this build has {bits.describe()} KV: "
                        "add --kv-bits 4 or use --kv-rotate auto")
    if mode == "hadamard" and not is_power_of_two(head_dim):
        raise UserError(f"--kv-rotate hadamard needs a power-of-two head_dim, and this model's is {head_dim}: "
                        "use --kv-rotate off")
    return "hadamard" if bits == 4 and is_power_of_two(head_dim) else "off"


def kv_rotation_note(mode: str, bits, head_dim: int) -> str:
    """Why `auto` left the int4 cache unrotated ("" when nothing to say)."""
    bits = parse_kv_bits(bits)
    if mode == "auto" and bits == 4 and not is_power_of_two(head_dim):
        return (f"--kv-rotate auto: no Hadamard rotation of the int4 KV cache "
                f"(head_dim {head_dim} is not a power of two)")
    return ""


def kv4_key_scales(rotation: str) -> str:
    """How an int4 cache chooses its keys' group scales, as the manifest names
    it: "clipped" (rotated keys, exact.quantize_rows_i4_clip) or "absmax"."""
    return "clipped" if rotation == "hadamard" else "absmax"


# --kv-center: the rotated int4 cache stores k and v minus their calibrated means (quant/kv_center.py).
KV_CENTERS = ("auto", "calibrated", "off")


def kv_centering(mode: str, bits, rotation: str) -> bool:
    """Whether a build centres its cache: "auto" where the int4 keys are
    rotated (quant/kv.kv_rotation), "calibrated" asks for it (an error where
    it cannot apply), "off" never."""
    if mode not in KV_CENTERS:
        raise UserError(f"--kv-center {mode} is not known: choose one of {', '.join(KV_CENTERS)}")
    if mode == "calibrated" and rotation != "hadamard":
        kv = parse_kv_bits(bits)
        raise UserError(f"--kv-center calibrated centres the Hadamard-rotated int4 cache, and this build has "
                        f"{kv.describe()} KV{', unrotated' if kv == 4 else ''}: add --kv-bits 4 (and a power-of-two "
                        "head_dim, --kv-rotate auto) or use --kv-center auto")
    return mode != "off" and rotation == "hadamard"
