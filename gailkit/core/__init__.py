"""The base every layer stands on: user errors, bounded and atomic file access, resource limits, Arrow tensors,
HMAC signatures, and the data that flows between actors and the learner (`Fragment`, `Weights`)."""
