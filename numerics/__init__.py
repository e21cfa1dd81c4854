"""numerics: arithmetic backends that route rules run on (reference, exact, emulated, native)."""
