"""How often the lookup's next token is the target's own, by class: the measurement behind the
n-gram priors in app/specchat/core/decoding/acceptance.py (docs/benchmarks.md, "Opening guesses").

For each prompt of a suite: the target's greedy reply (plain decoding, 128 tokens), then, at
every position of that reply, the first token the lookup drafter proposes there, its match
length and confidence band, and whether the reply has it. A position right after one where the
proposal was right is "following"; any other is an "opening".

    .venv/bin/python docs/bench/lookup_openings.py [SUITE.toml ...]   # default: the bundled suite
"""

from __future__ import annotations

import sys
from collections import defaultdict
from dataclasses import replace

from specchat.core.bench.runner import BenchSettings, prepare
from specchat.core.bench.suite import load_suite
from specchat.core.decoding.history_index import HistoryIndex
from specchat.core.decoding.ngram import OPENING, NgramDrafter
from specchat.core.decoding.runtime import RuntimeConfig
from specchat.core.engines.local import Engine
from specchat.core.reply import Reply
from specchat.core.store.local_models import default_pair_paths

TOKENS = 128


def main(paths: list[str]) -> None:
    target, _ = default_pair_paths()
    engine = Engine(target, None, target_config=RuntimeConfig(n_ctx=4096, n_threads=2))
    settings = BenchSettings(repeats=1, max_tokens=TOKENS)
    params = replace(settings.params, max_tokens=TOKENS)
    counts: dict[tuple[str, str, str, str], list[int]] = defaultdict(lambda: [0, 0])
    for path in paths or [None]:
        suite = load_suite(path)
        for prompt in suite.prompts:
            prepared = prepare(engine, prompt, settings)
            engine.reset_caches()
            reply = Reply.collect(engine.generate_tokens(prepared.tokens, params, "off"))
            history = HistoryIndex()
            history.add(prepared.history)
            history.finish()
            drafter = NgramDrafter(history=history)
            drafter.begin(list(prepared.tokens))
            last_right = False
            for token in reply.token_ids:
                proposal = drafter.propose(1)
                right = bool(proposal.tokens) and proposal.tokens[0] == token
                if proposal.tokens:
                    cls = proposal.first_class().removeprefix(OPENING)
                    length, _, band = cls.rpartition("/")
                    where = "following" if last_right else "opening"
                    row = counts[(str(path or "default"), where, length, band)]
                    row[0] += 1
                    row[1] += right
                last_right = right
                drafter.extend([token])
            print(f"{prompt.id}: {len(reply.token_ids)} tokens", file=sys.stderr)
    print("suite | position | match | band | proposed | right | share")
    for (suite_name, where, length, band), (n, right) in sorted(counts.items()):
        print(f"{suite_name} | {where} | {length} | {band} | {n} | {right} | {right / n:.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
