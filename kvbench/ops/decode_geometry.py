"""The model geometries paged decode is measured at: one named table, read by the asv suite
(benchmarks/paged_decode.py, PagedDecodeGeometry), `kvbench table paged_decode --geometry`
and the tests.

A geometry is what a model's attention asks of a decode kernel: query heads, KV heads,
head_dim, the engine's page size, and the decode options its attention uses (a sliding
window, a logit soft-cap). The figures are the models' published configurations
(Hugging Face config.json: num_attention_heads, num_key_value_heads, head_dim or
hidden_size / num_attention_heads, sliding_window, attn_logit_softcapping), for the whole
model on one GPU (no tensor parallelism splitting the heads). Each one is here because it
exercises something the default geometry (Llama-3's) does not:

- llama3-8b: the default geometry of every other measured case (GQA 4, head_dim 128), so
  the axis has its baseline at the same case;
- qwen2.5-7b: GQA 7, a group that is not a power of two (the CUDA row refuses it);
- phi-3-mini-128k: MHA (32 = 32 heads) at head_dim 96, a padded Triton tile (its config's
  262144-token sliding window exceeds its 131072-token context, so it attends to everything);
- gemma-2-9b: head_dim 256 (the Triton rows' largest tile), with its logit soft-cap 50.0 and
  the 4096-token sliding window of its local layers;
- nemotron-4-340b: head_dim 192 (padded to 256) with GQA 12.

Importing this module imports nothing but the standard library: `kvbench table --help` lists
the names without importing torch. The inputs of a geometry's case are built by
kvbench.ops.paged_decode (geometry_pool, geometry_inputs).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

#: The value of --geometry that names every geometry.
ALL = "all"


@dataclass(frozen=True)
class Geometry:
    """One model's decode geometry and options (see the module docstring)."""

    name: str
    #: The model the figures come from, as its publisher names it.
    model: str
    q_heads: int
    kv_heads: int
    head_dim: int
    #: Tokens per KV page (vLLM's default block size for all of them).
    page_size: int = 16
    #: Sliding window (attend to the last `window` tokens), None for full attention.
    window: int | None = None
    #: Logit soft-cap (scores become softcap * tanh(score / softcap)), None for none.
    softcap: float | None = None

    def __post_init__(self) -> None:
        if self.q_heads % self.kv_heads:
            raise ValueError(f"{self.name}: q_heads {self.q_heads} is not a multiple of "
                             f"kv_heads {self.kv_heads}")

    @property
    def group(self) -> int:
        """Query heads per KV head (the GQA ratio)."""
        return self.q_heads // self.kv_heads

    @property
    def options(self) -> dict[str, int | float]:
        """The decode options to pass (keyword arguments of the rows), only those set."""
        return {k: v for k, v in (("window", self.window), ("softcap", self.softcap))
                if v is not None}

    def summary(self) -> str:
        """One line: heads, head_dim, options (the table's and the suite's label)."""
        opts = "".join(f", {k} {v:g}" for k, v in self.options.items())
        return (f"{self.name}: {self.q_heads} q / {self.kv_heads} kv heads, head_dim "
                f"{self.head_dim}, page {self.page_size}{opts}")

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


#: Every geometry by name, in the order tables list them.
GEOMETRIES: dict[str, Geometry] = {g.name: g for g in (
    Geometry("llama3-8b", "Meta-Llama-3-8B", q_heads=32, kv_heads=8, head_dim=128),
    Geometry("qwen2.5-7b", "Qwen2.5-7B", q_heads=28, kv_heads=4, head_dim=128),
    Geometry("phi-3-mini-128k", "Phi-3-mini-128k-instruct", q_heads=32, kv_heads=32,
             head_dim=96),
    Geometry("gemma-2-9b", "gemma-2-9b", q_heads=16, kv_heads=8, head_dim=256,
             window=4096, softcap=50.0),
    Geometry("nemotron-4-340b", "Nemotron-4-340B", q_heads=96, kv_heads=8, head_dim=192),
)}


def select_geometries(name: str) -> tuple[Geometry, ...]:
    """The geometries `name` asks for: one by its name, or every one for "all". ValueError
    listing the accepted names otherwise."""
    if name == ALL:
        return tuple(GEOMETRIES.values())
    if name in GEOMETRIES:
        return (GEOMETRIES[name],)
    raise ValueError(f"unknown geometry {name!r}; accepted: {ALL}, {', '.join(GEOMETRIES)}")
