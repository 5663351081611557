"""mode_twin: an independent PyTorch reading of mode's model contract
(MODEL.md, docs/kinds/), for checking checkpoints outside the harness."""
from .checkpoint import Checkpoint, CheckpointError, load, load_h5, load_safetensors, read_safetensors, write_safetensors
from .model import Model, eval_windows, evaluate, read_tokens

__all__ = ["Checkpoint", "CheckpointError", "load", "load_h5", "load_safetensors",
           "read_safetensors", "write_safetensors", "Model", "eval_windows", "evaluate", "read_tokens"]
