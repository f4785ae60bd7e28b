#!/usr/bin/env bash
# Everything bench/lm_fusion.py reads, built from a fresh checkout, then the bench itself: the
# read-speech corpus, its three word LMs (cross-entropy, SNIS, NCE) and their ONNX sentence
# scorers, the spoken-numbers corpus and recogniser whose encoder the read-speech recogniser
# starts from, the read-speech recogniser itself (7,000 steps), and the bench over 8-best lists
# (with fusion and the two passes) and 32-best lists, and last a cross-entropy LM trained three
# epochs, beside the one-epoch LM. About 6 hours on this machine's 2 cores.
#
# Why a script: the measurement of issue 39 needs all of it, and a session that starts on a
# fresh checkout has less time than the chain takes. Each step is skipped when its marker
# (`runs/.recipe/NAME.done`) exists, and a training that was stopped resumes from its last
# checkpoint, so running the script again goes on where it stopped.
#
# Run it in the background, from a checkout no one edits while it runs (a git worktree whose
# .cache and runs link to the main checkout's):
#     nohup nice -n 19 bench/lm_fusion_recipe.sh > runs/lm_fusion_recipe.log 2>&1 &
# The bench's figures end up in runs/bench-lm-fusion-recipe*/bench.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
SEQC=("$PYTHON" -m seqc.cli)
MARKS=runs/.recipe
mkdir -p "$MARKS"
VERSES=examples/asr/read_speech.seq
NUMBERS=examples/asr/spoken_numbers.seq

step() {  # step NAME COMMAND...: run COMMAND once, timed, unless NAME is marked done
  local name=$1
  shift
  if [[ -e $MARKS/$name.done ]]; then
    echo "== $name: done before ($(cat "$MARKS/$name.done"))"
    return
  fi
  echo "== $name: $* ($(date -u +%FT%TZ))"
  local start=$SECONDS
  "$@"
  echo "$((SECONDS - start)) s, finished $(date -u +%FT%TZ)" > "$MARKS/$name.done"
  echo "== $name: $(cat "$MARKS/$name.done")"
}

train() {  # train NAME SPEC EXPERIMENT RUN_DIR [ARGS...]: resumes a run that has checkpoints
  local name=$1 spec=$2 experiment=$3 run_dir=$4
  shift 4
  local resume=()
  if compgen -G "$run_dir/checkpoints/*" > /dev/null; then
    resume=(--resume)
  fi
  step "$name" "${SEQC[@]}" train "$spec" -e "$experiment" --run-dir "$run_dir" "${resume[@]}" "$@"
}

export_lm() {  # export_lm NAME EXPERIMENT RUN_DIR [ARGS...]
  local name=$1 experiment=$2 run_dir=$3
  shift 3
  step "$name" "${SEQC[@]}" export "$VERSES" -e "$experiment" --run-dir "$run_dir" \
    --format onnx --quantize none --sentences "$@"
}

step data-verses "${SEQC[@]}" data prepare spoken-verses
train lm-ce "$VERSES" lm.verses.ce runs/lm.verses.ce
train lm-snis "$VERSES" lm.verses.snis runs/lm.verses.snis
train lm-nce "$VERSES" lm.verses.nce runs/lm.verses.nce
export_lm export-ce lm.verses.ce runs/lm.verses.ce
export_lm export-snis lm.verses.snis runs/lm.verses.snis
export_lm export-snis-raw lm.verses.snis runs/lm.verses.snis --no-normalize
export_lm export-nce-raw lm.verses.nce runs/lm.verses.nce --no-normalize
step data-numbers "${SEQC[@]}" data prepare spoken-numbers
train asr-numbers "$NUMBERS" asr.numbers.robust runs/asr.robust
train asr-verses "$VERSES" asr.verses.ctc.warm runs/asr.verses.ctc.warm --set train.steps=7000
LMS=(--lm ce=runs/lm.verses.ce/export/onnx-none
  --lm snis_raw=runs/lm.verses.snis/export/onnx-none-score
  --lm nce_raw=runs/lm.verses.nce/export/onnx-none-score
  --lm snis_normalized=runs/lm.verses.snis/export/onnx-none)

measure() {  # measure NAME BENCH_ARGS...: bench/lm_fusion.py, its output in runs/NAME/bench.txt
  local name=$1
  shift
  mkdir -p "runs/$name"
  if [[ -n ${LISTS_FROM:-} ]]; then  # the n-best lists another measurement decoded
    cp -n "runs/$LISTS_FROM"/{dev,test}.nbest.jsonl "runs/$name/"
  fi
  step "$name" bash -c '"$@" > "$0/bench.txt" 2>&1' "runs/$name" "$PYTHON" bench/lm_fusion.py \
    --asr-experiment asr.verses.ctc.warm --asr-run-dir runs/asr.verses.ctc.warm \
    --nbest-dir "runs/$name" "${LMS[@]}" "$@"
  tail -n 12 "runs/$name/bench.txt"
}

# rescoring of 8-best lists, shallow fusion with its weights searched on dev and the two passes
# (the cross-entropy LM and the SNIS LM's raw scores); then rescoring of 32-best lists
measure bench-lm-fusion-recipe --fusion --fusion-lm ce --fusion-lm snis_raw
measure bench-lm-fusion-recipe-32 --nbest 32 --width 32

# Does a stronger LM gain more? The cross-entropy LM trained three epochs instead of one (about
# an hour more), its rescoring of the same 8-best lists beside the one-epoch LM's.
train lm-ce-2400 "$VERSES" lm.verses.ce runs/lm.verses.ce.2400 --set train.steps=2400
export_lm export-ce-2400 lm.verses.ce runs/lm.verses.ce.2400 --set train.steps=2400
LMS=(--lm ce=runs/lm.verses.ce/export/onnx-none --lm ce_2400=runs/lm.verses.ce.2400/export/onnx-none)
LISTS_FROM=bench-lm-fusion-recipe measure bench-lm-fusion-recipe-ce2400
echo "== all built and measured: runs/bench-lm-fusion-recipe*/bench.txt"
