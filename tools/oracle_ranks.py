"""mlx-lm's sharded references (tools/sharded_oracle.py, tools/sharded_verbs_oracle.py) run in two
ring ranks that stay up between calls, instead of two fresh ones per call under mlx.launch: the
ranks import mlx-lm and join the ring once (about four seconds of each call otherwise), then run
each call's main() with its arguments, as the script's own process would. Every call still loads
and shards its model (mlx_lm.utils.sharded_load's steps, tools/sharded_oracle.py), and whatever a
call patches in mlx-lm's modules or the oracles' (their load, save and record hooks) is put back
before the next one.

The ranks are started by hand with the ring environment mlx.launch gives (MLX_RANK, MLX_HOSTFILE).
Each reads one call per line on stdin (a JSON [script, argv]) and answers one JSON line on its
stdout once its main() returned (rank 0 has written its files by then: both oracles end with an
all_sum every rank meets); what main() prints goes to the rank's log. A call that fails or runs
past its timeout on either rank stops both (the ring may be out of step); the next call starts a
new pair.

  from oracle_ranks import RANKS
  RANKS.run("sharded_oracle", "--model", path, "--tokens", "1,2", "--out", out)
"""
import atexit
import json
import os
import selectors
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ring_ports import free_port

SCRIPTS = ("sharded_oracle", "sharded_verbs_oracle")


class OracleRanks:
    def __init__(self, n=2):
        self.n, self.procs, self.logs, self.work = n, None, [], None

    def _start(self):
        self.work = work = Path(tempfile.mkdtemp(prefix="oracle-ranks-"))
        hostfile = work / "hosts.json"
        hostfile.write_text(json.dumps([[f"127.0.0.1:{free_port()}"] for _ in range(self.n)]) + "\n")
        env = {**os.environ, "MLX_HOSTFILE": str(hostfile), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        self.logs = [work / f"rank{r}.log" for r in range(self.n)]
        self.procs = []
        for r in range(self.n):
            with open(self.logs[r], "w") as log:
                self.procs.append(subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE,
                                                   stdout=subprocess.PIPE, stderr=log,
                                                   env={**env, "MLX_RANK": str(r)}))

    def close(self):
        for p in self.procs or ():
            p.kill()
            p.wait()
            p.stdin.close()
            p.stdout.close()
        self.procs = None
        if self.work is not None:
            shutil.rmtree(self.work, ignore_errors=True)
            self.work = None

    def _log_tails(self):
        return "\n".join(f"--- rank {r}:\n{log.read_text(errors='replace')[-3000:]}" for r, log in enumerate(self.logs))

    def run(self, script, *args, timeout=120):
        """Runs `script`'s main() with `args` on every rank; raises AssertionError, with the ranks'
        errors, unless every rank returned within `timeout` seconds."""
        assert script in SCRIPTS, script
        if self.procs is None or any(p.poll() is not None for p in self.procs):
            self.close()
            self._start()
        line = (json.dumps([script, [str(a) for a in args]]) + "\n").encode()
        for p in self.procs:
            p.stdin.write(line)
            p.stdin.flush()
        answers, pending = {}, {p.stdout.fileno(): (r, b"") for r, p in enumerate(self.procs)}
        sel = selectors.DefaultSelector()
        for fd in pending:
            sel.register(fd, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for key, _ in sel.select(timeout=max(0.0, deadline - time.monotonic())):
                r, got = pending[key.fd]
                chunk = os.read(key.fd, 65536)
                got += chunk
                if chunk and not got.endswith(b"\n"):
                    pending[key.fd] = (r, got)
                    continue
                answers[r] = json.loads(got) if chunk else {"ok": False, "error": "the rank exited"}
                del pending[key.fd]
                sel.unregister(key.fd)
        sel.close()
        if pending or not all(a["ok"] for a in answers.values()):
            errors = [f"rank {r}: " + (answers[r]["error"] if r in answers else f"no answer in {timeout}s")
                      for r in range(self.n) if not answers.get(r, {}).get("ok")]
            tails = self._log_tails()
            self.close()
            raise AssertionError(f"{script} {' '.join(map(str, args))} failed:\n" + "\n".join(errors) + "\n" + tails)


RANKS = OracleRanks()
atexit.register(RANKS.close)


def serve():
    """One rank: runs the calls read from stdin until it closes."""
    import traceback

    answer_to = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # what the oracles print goes to the log
    import mlx.core as mx
    import mlx.nn as nn
    from mlx_lm import cache_prompt, perplexity

    import batch_oracle
    import perplexity_oracle
    import sharded_oracle
    import sharded_verbs_oracle

    mains = {"sharded_oracle": sharded_oracle.main, "sharded_verbs_oracle": sharded_verbs_oracle.main}
    # The modules whose functions a call replaces (load, save_prompt_cache, load_dataset, eval_ppl,
    # cross_entropy, load_model): each is put back as it was after every call.
    patched = [nn.losses, perplexity, cache_prompt, batch_oracle, perplexity_oracle, sharded_oracle,
               sharded_verbs_oracle]
    saved = [(vars(m), dict(vars(m))) for m in patched]
    mx.distributed.init()  # join the ring now, before the first call
    for line in sys.stdin:
        script, argv = json.loads(line)
        sys.argv = [f"{script}.py", *argv]
        try:
            mains[script]()
            answer = {"ok": True}
        except BaseException:  # SystemExit too (argparse)
            answer = {"ok": False, "error": traceback.format_exc()}
        for now, before in saved:
            for k in set(now) - set(before):
                del now[k]
            now.update((k, v) for k, v in before.items() if now.get(k) is not v)
        mx.clear_cache()
        sys.stdout.flush()
        answer_to.write(json.dumps(answer) + "\n")
        if not answer["ok"]:
            break


if __name__ == "__main__":
    serve()
