"""Help that shows each flag's default and one example per command."""

from __future__ import annotations

import argparse

EXAMPLES = {
    "gailkit expert train": "gailkit expert train --env CartPole-v1",
    "gailkit train": "gailkit train --env CartPole-v1 --demos data/cartpole.arrow --preset fast",
    "gailkit actor": "gailkit actor --connect tcp://LEARNER:5555 --key-file keys/gailkit.key",
    "gailkit keys generate": "gailkit keys generate --out keys/gailkit.key",
    "gailkit evaluate": "gailkit evaluate runs/cartpole --episodes 20 --video cartpole.gif",
    "gailkit export": "gailkit export runs/cartpole --out exports/cartpole.onnx",
    "gailkit infer": "gailkit infer exports/cartpole.onnx --episodes 5",
    "gailkit tune": "gailkit tune --env Pendulum-v1 --demos data/pendulum.arrow --space experts/spaces/small.yaml",
    "gailkit config show": "gailkit config show --env Hopper-v4 --preset fast --set ppo.n_steps=128",
    "gailkit demos record": "gailkit demos record --expert experts/cartpole.zip --episodes 25 --out data/cartpole.arrow",
    "gailkit demos inspect": "gailkit demos inspect data/ --env CartPole-v1",
    "gailkit demos convert": "gailkit demos convert data/cartpole.arrow cartpole.parquet",
    "gailkit demos strip-actions": "gailkit demos strip-actions data/hopper.arrow hopper-obs.arrow",
    "gailkit demos subsample": "gailkit demos subsample data/hopper.arrow hopper-4x20.arrow --episodes 4 --every 20",
}


class DefaultsHelp(argparse.HelpFormatter):
    """argparse's help, with ` (default: X)` after flags whose default says something."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if not _says_something(action.default) or "default" in text.lower() or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)"


def _says_something(default: object) -> bool:
    return default not in (None, False, argparse.SUPPRESS, [], "")


def finish(parser: argparse.ArgumentParser) -> None:
    """Every (sub)command's help shows defaults and, for a leaf command, one example."""
    parser.formatter_class = DefaultsHelp
    example = EXAMPLES.get(parser.prog)
    if example:
        parser.epilog = f"example: {example}"
    for action in parser._actions:
        if action.help is None and action.option_strings and _says_something(action.default):
            action.help = "(default: %(default)s)"
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                finish(child)
