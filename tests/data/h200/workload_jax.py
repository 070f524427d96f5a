"""The JAX workload of the H200 captures: two transformer blocks' training steps in bf16.

The same shapes as workload_torch.py; plain jax.numpy (attention by einsum, so XLA fuses
it into matmul fusions with cost data), SGD. ``jax.profiler.trace`` writes the XSpace
(``plugins/profile/<run>/<host>.xplane.pb``) of the measured steps, each in a
``StepTraceAnnotation``.
"""

from __future__ import annotations

import argparse
import math

import jax
import jax.numpy as jnp

D_MODEL, HEADS, SEQ, BATCH, LAYERS = 2048, 16, 1024, 8, 2
WARMUP, MEASURED = 3, 3


def init(key: jax.Array) -> list[dict[str, jax.Array]]:
    def dense(k: jax.Array, n_in: int, n_out: int) -> jax.Array:
        return (jax.random.normal(k, (n_in, n_out), jnp.float32) / math.sqrt(n_in)).astype(jnp.bfloat16)

    layers = []
    for k in jax.random.split(key, LAYERS):
        k1, k2, k3, k4 = jax.random.split(k, 4)
        layers.append({"qkv": dense(k1, D_MODEL, 3 * D_MODEL), "proj": dense(k2, D_MODEL, D_MODEL),
                       "fc1": dense(k3, D_MODEL, 4 * D_MODEL), "fc2": dense(k4, 4 * D_MODEL, D_MODEL)})
    return layers


def layer_norm(x: jax.Array) -> jax.Array:
    x32 = x.astype(jnp.float32)
    mean = x32.mean(-1, keepdims=True)
    return ((x32 - mean) * jax.lax.rsqrt(((x32 - mean) ** 2).mean(-1, keepdims=True) + 1e-5)).astype(x.dtype)


def block(p: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    b, s, d = x.shape
    q, k, v = (layer_norm(x) @ p["qkv"]).reshape(b, s, 3, HEADS, d // HEADS).transpose(2, 0, 3, 1, 4)
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(d // HEADS)
    scores = jnp.where(jnp.tril(jnp.ones((s, s), bool)), scores, jnp.finfo(scores.dtype).min)
    attn = jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores.astype(jnp.float32), -1).astype(x.dtype), v)
    x = x + attn.transpose(0, 2, 1, 3).reshape(b, s, d) @ p["proj"]
    return x + jax.nn.gelu(layer_norm(x) @ p["fc1"]) @ p["fc2"]


def loss_fn(params: list[dict[str, jax.Array]], x: jax.Array) -> jax.Array:
    for p in params:
        x = block(p, x)
    return jnp.mean(x.astype(jnp.float32) ** 2)


@jax.jit
def train_step(params: list[dict[str, jax.Array]], x: jax.Array) -> tuple[list[dict[str, jax.Array]], jax.Array]:
    loss, grads = jax.value_and_grad(loss_fn)(params, x)
    return jax.tree.map(lambda p, g: (p - 1e-4 * g).astype(p.dtype), params, grads), loss


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True, help="jax.profiler.trace's log directory")
    parser.add_argument("--dry-run", action="store_true", help="small shapes, for a CPU check of the script")
    args = parser.parse_args()
    batch, seq = (1, 64) if args.dry_run else (BATCH, SEQ)
    params = init(jax.random.key(0))
    x = jax.random.normal(jax.random.key(1), (batch, seq, D_MODEL), jnp.float32).astype(jnp.bfloat16)
    for _ in range(WARMUP):
        params, loss = train_step(params, x)
    loss.block_until_ready()
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0  # the host's Python calls would be most of the file
    with jax.profiler.trace(args.out, profiler_options=options):
        for i in range(MEASURED):
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                params, loss = train_step(params, x)
                loss.block_until_ready()


if __name__ == "__main__":
    main()
