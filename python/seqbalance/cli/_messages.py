"""The library's messages in the shell's words: flags instead of keyword arguments.

The library names its keyword arguments (``k_partitions``, ``equal_size='nearly'``, ``pass
num_hidden_layers=...``); a shell user set them with flags, or, for a model, with the fields of
a config file. The command line passes every library message through `flag_words` (and a model
config's through `config_words`) before printing it.
"""

from __future__ import annotations

import re

__all__ = ["config_words", "flag_words"]

#: (pattern, replacement), applied in order: the longer phrases first.
_FLAG_WORDS: tuple[tuple[str, str], ...] = (
    (r"pass equal_size=False", "drop --equal-size and --nearly-equal"),
    (r"equal_size=(?:'nearly'|\"nearly\")", "--nearly-equal"),
    (r"equal_size=True", "--equal-size"),
    (r"equal_size=False", "free counts"),
    (r"\bequal_size\b", "the equal-size rule"),
    (r"\bk_partitions\b", "-k"),
    (r"\bdp_size\b", "--dp"),
    (r"\bmax_token_len\b", "--max-token-len"),
    (r"\b(?:force_)?group_size\b", "--group-size"),
    (r"\buid_list\b", "--uid-field"),
    (r"\bmax_sequences\b", "--max-sequences"),
    (r"\bfootprint='(\w+)'", r"--footprint \1"),
    (r"\bfootprint\b", "--footprint"),
    (r"\bpass cost='tokens'", "pass --cost tokens"),
    (r"\bcost='(\w+)'", r"--cost \1"),
    (r"\brefine=True\b", "--refine"),
    (r"\bkeys\[(\d+)\]", r"the --key-field of sample \1"),
    (r"\bpipeline_stages=(\d+)", r"--pipeline-stages \1"),
    (r"\bpipeline_stages\b", "--pipeline-stages"),
    (r"\bsync='(\w+)'", r"--sync \1"),
    (r"\bforward_share\b", "--forward-share"),
    (r"\bmax_num_micro_batches = ", "--max-num-micro-batches "),
    (r"\bmax_num_micro_batches\b", "--max-num-micro-batches"),
    (r"\border='(\w+)'", r"--order \1"),
    (r"\bleave order out\b", "leave --order out"),
    (r", or None\b", ""),
)

#: A model config's fixes are edits to the file: (pattern, replacement with ``{file}``).
_CONFIG_WORDS: tuple[tuple[str, str], ...] = (
    (r"^ModelCost cannot read the model: ", "cannot read the model: "),
    (r"^ModelCost cannot model (\w+)=", r'cannot model the field "\1" = '),
    (r"pass layer_types= with one entry per layer", 'add "layer_types" (one entry per layer)'),
    (r"say which layers are MoE with (\w+)=, (\w+)= or (\w+)=", r'add "\1", "\2" or "\3"'),
    (r"\band (\w+)=None\b", r'and set "\1" to null'),
    (r"\bpass (\w+)=None\b", r'set "\1" to null'),
    (r"\bpass (\w+)=\.\.\.", r'add "\1" to {file}'),
    (r"\b(\w+)=\.\.\.", r'"\1"'),
)


def flag_words(message: str) -> str:
    """``message`` with the library's keyword arguments named as the command line's flags.

    Example:
        >>> flag_words("with equal_size=True (equal_size='nearly' allows counts that differ by one)")
        'with --equal-size (--nearly-equal allows counts that differ by one)'
    """
    for pattern, replacement in _FLAG_WORDS:
        message = re.sub(pattern, replacement, message)
    return message


def config_words(message: str, file: str) -> str:
    """A `ModelCost.from_config` message as the edit to make to the config ``file``.

    Example:
        >>> config_words("ModelCost cannot read the model: num_hidden_layers is missing "
        ...              "(every model has it); pass num_hidden_layers=...", "config.json")
        'cannot read the model: num_hidden_layers is missing (every model has it); add "num_hidden_layers" to config.json'
    """
    for pattern, replacement in _CONFIG_WORDS:
        # The file name is text, not a template: its backslashes (Windows paths) stay as they are.
        message = re.sub(
            pattern, replacement.replace("{file}", file.replace("\\", "\\\\")), message
        )
    return message
