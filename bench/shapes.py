"""What the Jacobian benchmarks share: the model shape (random weights; a small vocabulary: the benches time
sublayers). The machine they ran on: ``harness.machine_info``."""

SMOLLM2 = dict(
    vocab_size=512,
    hidden_size=576,
    intermediate_size=1536,
    num_attention_heads=9,
    num_key_value_heads=3,
    max_position_embeddings=256,
    rms_norm_eps=1e-5,
)
