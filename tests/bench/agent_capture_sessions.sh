#!/usr/bin/env bash
# Capture real Claude Code and Codex CLI traffic through the recording upstream (tests/bench/agent_capture.py),
# scrub it and write tests/bench/agent_sessions/{claude_code,codex}.jsonl.gz (see the README there).
#
# Per CLI: a fresh scratch git repository and a fresh scratch $HOME (no config of the machine leaks in),
# 3 sessions of 5 turns; between sessions one new commit in the repository. Session 3 runs one day later:
# Claude Code under libfaketime (LD_PRELOAD with FAKETIME=+1d: the `faketime` wrapper itself fails with its
# shared-memory semaphore); Codex is a static musl binary that LD_PRELOAD cannot reach, so it gets a TZ
# 23h59m east of UTC instead, which moves its <current_date> to tomorrow (except in the first minute after
# midnight UTC) while its <timezone> (read from /etc/localtime) stays.
#
#   tests/bench/agent_capture_sessions.sh            # needs: npm install in tests/agents; apt-get install faketime
#
# Env: PORT (8765), REPO (/tmp/agentrepo), SCRATCH (/var/tmp/agent-capture; Codex refuses to put its helper
# binaries under /tmp, so the homes live elsewhere), OUT (tests/bench/agent_sessions), CLIS (the CLIs to capture:
# "claude codex"), CODEX_MODEL (the model Codex is told to use, as a self-hosted user names theirs: "local-model";
# for a model it does not know, Codex sends plain Responses tools, as vLLM takes them).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PY:-$ROOT/.venv/bin/python}
BIN=$ROOT/tests/agents/node_modules/.bin
PORT=${PORT:-8765}
REPO=${REPO:-/tmp/agentrepo}
SCRATCH=${SCRATCH:-/var/tmp/agent-capture}
OUT=${OUT:-$ROOT/tests/bench/agent_sessions}
KEY=sk-test
CLIS=${CLIS:-claude codex}
CODEX_MODEL=${CODEX_MODEL:-local-model}
LIBFAKETIME=${LIBFAKETIME:-/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1}
NEXT_DAY_TZ='<+2359>-23:59'

PROMPTS=(
  "Add a multiply function to calc.py"
  "Add a docstring to every function in calc.py"
  "Write pytest tests for add and sub in test_calc.py"
  "Is there any input validation missing in calc.py?"
  "Summarize what you changed"
  "Add a divide function that raises ValueError on division by zero"
  "Rename sub to subtract and update callers"
  "Add type hints to calc.py"
  "Update README.md to list the functions"
  "Run the tests and tell me if they pass"
  "Add a power function to calc.py"
  "Refactor calc.py so every function checks its arguments are numbers"
  "Add a CLI entry point: python calc.py add 1 2"
  "Write a short CHANGELOG.md entry for today's work"
  "What would you improve next in this repository?"
)

git_at() {  # fixed dates, so the commit hashes come out the same on every recapture
  GIT_AUTHOR_DATE="$1" GIT_COMMITTER_DATE="$1" git -C "$REPO" "${@:2}"
}

make_repo() {
  rm -rf "$REPO" && mkdir -p "$REPO"
  git -C "$REPO" init -q -b main
  git -C "$REPO" config user.name "Dev User" && git -C "$REPO" config user.email dev@example.com
  printf '"""A tiny calculator."""\n\n\ndef add(a, b):\n    return a + b\n' > "$REPO/calc.py"
  git -C "$REPO" add calc.py && git_at "2026-01-05T10:00:00Z" commit -qm "Add calculator"
  printf '\n\ndef sub(a, b):\n    return a - b\n' >> "$REPO/calc.py"
  git_at "2026-01-05T11:00:00Z" commit -qam "Add subtraction"
  printf '# calc\n\nA tiny calculator.\n' > "$REPO/README.md"
  printf 'from calc import add\n\nprint(add(1, 2))\n' > "$REPO/main.py"
  git -C "$REPO" add README.md main.py && git_at "2026-01-05T12:00:00Z" commit -qm "Add README and main"
  printf '\n\ndef mul(a, b):\n    return a * b\n' >> "$REPO/calc.py"  # session 1 starts with a change pending
}

between_sessions() {  # commit what is pending, then leave a new change for the next session to see
  local session=$1
  git -C "$REPO" add -A && git_at "2026-01-0$((5 + session))T09:00:00Z" commit -qm "Work from session $session"
  printf 'def test_add():\n    assert __import__("calc").add(1, 2) == 3\n' > "$REPO/test_calc_$session.py"
  printf '\nSession %s notes.\n' "$session" >> "$REPO/README.md"
}

start_recorder() {  # $1: raw output file
  rm -f "$1"
  "$PY" "$ROOT/tests/bench/agent_capture.py" --port "$PORT" --out "$1" &
  RECORDER=$!
  for _ in $(seq 50); do
    curl -sf -X POST "http://127.0.0.1:$PORT/_capture/mark" -d '{"session": null, "turn": null}' >/dev/null && return
    sleep 0.2
  done
  echo "recorder did not start" >&2 && exit 1
}

stop_recorder() { kill "$RECORDER" && wait "$RECORDER" 2>/dev/null || true; }

mark() { curl -sf -X POST "http://127.0.0.1:$PORT/_capture/mark" -d "{\"session\": $1, \"turn\": $2}" >/dev/null; }

run_claude() {  # session turn prompt
  local when=()
  [ "$1" = 3 ] && when=(env LD_PRELOAD="$LIBFAKETIME" FAKETIME=+1d)
  local again=()
  [ "$2" -gt 1 ] && again=(--continue)
  (cd "$REPO" && env -i PATH="$PATH" HOME="$SCRATCH/home-claude" TERM=xterm LANG=C.UTF-8 SHELL=/bin/bash \
     DISABLE_TELEMETRY=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1 \
     ANTHROPIC_BASE_URL="http://127.0.0.1:$PORT" ANTHROPIC_API_KEY=$KEY \
     "${when[@]}" "$BIN/claude" -p "${again[@]}" "$3" </dev/null)
  [ "$1" = 3 ] && remove_new_semaphores
  return 0
}

FAKETIME_SEMS=$SCRATCH/faketime-sems
remember_semaphores() { find /dev/shm -maxdepth 1 -name 'sem.faketime_sem_*' | sort > "$FAKETIME_SEMS"; }
remove_new_semaphores() {  # libfaketime leaves one semaphore per Claude Code run (it exits past the cleanup)
  find /dev/shm -maxdepth 1 -name 'sem.faketime_sem_*' | sort | comm -13 "$FAKETIME_SEMS" - | xargs -r rm -f
}

run_codex() {  # session turn prompt
  local tz=()
  [ "$1" = 3 ] && tz=(TZ="$NEXT_DAY_TZ")
  local command=(exec --skip-git-repo-check)
  [ "$2" -gt 1 ] && command=(exec --skip-git-repo-check resume --last)
  (cd "$REPO" && env -i PATH="$PATH" HOME="$SCRATCH/home-codex" TERM=xterm LANG=C.UTF-8 SHELL=/bin/bash \
     CAPTURE_API_KEY=$KEY \
     "${tz[@]}" "$BIN/codex" "${command[@]}" "$3" </dev/null)
}

write_codex_config() {
  mkdir -p "$SCRATCH/home-codex/.codex"
  cat > "$SCRATCH/home-codex/.codex/config.toml" <<EOF
model_provider = "capture"
model = "$CODEX_MODEL"

[model_providers.capture]
name = "capture"
base_url = "http://127.0.0.1:$PORT/v1"
env_key = "CAPTURE_API_KEY"
wire_api = "responses"
EOF
}

capture() {  # cli: claude or codex; name: claude_code or codex
  local cli=$1 name=$2 raw=$SCRATCH/raw-$2.jsonl
  rm -rf "$SCRATCH/home-$cli" && mkdir -p "$SCRATCH/home-$cli"
  [ "$cli" = codex ] && write_codex_config
  make_repo
  start_recorder "$raw"
  trap stop_recorder EXIT
  for session in 1 2 3; do
    [ "$session" -gt 1 ] && between_sessions $((session - 1))
    for turn in 1 2 3 4 5; do
      mark "$session" "$turn"
      echo "== $name session $session turn $turn" >&2
      "run_$cli" "$session" "$turn" "${PROMPTS[$(( (session - 1) * 5 + turn - 1 ))]}" >&2
    done
  done
  stop_recorder
  trap - EXIT
  "$PY" "$ROOT/tests/bench/agent_capture_scrub.py" --raw "$raw" --out "$OUT/$name.jsonl.gz" --cli "$name" \
    --repo "$REPO" --home "$SCRATCH/home-$cli" --api-key "$KEY"
}

mkdir -p "$SCRATCH" "$OUT"
remember_semaphores
"$BIN/claude" --version && "$BIN/codex" --version
case " $CLIS " in *" claude "*) capture claude claude_code ;; esac
case " $CLIS " in *" codex "*) capture codex codex ;; esac
