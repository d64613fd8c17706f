#!/usr/bin/env bash
# The include rules that keep kvdrift's parts apart; one line per violation, exit 1 on any.
#   harness: cli -> plan -> run -> judge -> report -> model. A file may include headers of its
#            own stage and of stages to its right, always named with their folder
#            ("judge/compare.h"); never a stage to its left.
#   common:    includes nothing of engine/, reference/ or harness/.
#   engine:    includes nothing of reference/ or harness/.
#   reference: includes nothing of engine/ or harness/ (it reads the model file itself).
# Usage: check-layers.sh [ROOT]   (default: the repository this script is in)
#        check-layers.sh --self-test   (a tree with one wrong-way include of each kind must fail)
set -u
if [ "${1:-}" = --self-test ]; then
    t=$(mktemp -d) || exit 2
    trap 'rm -rf "$t"' EXIT
    mkdir -p "$t"/harness/{model,run} "$t"/engine/include "$t"/reference "$t"/common
    printf '#include "run/drive.h"\n' > "$t/harness/model/config.h"       # model -> run
    printf '#include "drive.h"\n' > "$t/harness/run/trace.c"              # stage not named
    : > "$t/harness/run/drive.h"
    printf '#include "kvd_engine.h"\n' > "$t/reference/ref_forward.c"     # reference -> engine
    : > "$t/engine/include/kvd_engine.h"
    out=$(bash "$0" "$t") && { echo "layers self-test: a wrong-way tree passed"; exit 1; }
    for want in "model/ may not include run/" "name its stage" "the reference never sees the engine"; do
        case "$out" in *"$want"*) ;; *) echo "layers self-test: no line saying '$want'"; exit 1 ;; esac
    done
    echo "layers self-test: ok (3 wrong-way includes named)"
    exit 0
fi
root=${1:-"$(dirname "$0")/.."}
cd "$root" || exit 2
stages=(cli plan run judge report model)
rank() { local i; for i in "${!stages[@]}"; do [ "${stages[$i]}" = "$1" ] && { echo "$i"; return; }; done; echo -1; }

# header name -> the part that owns it (engine public headers, reference public headers, common)
declare -A owner
for h in engine/include/*.h engine/*.h; do owner[$(basename "$h")]=engine; done
for h in reference/include/*.h; do owner[$(basename "$h")]=reference; done
for h in common/*.h; do owner[$(basename "$h")]=common; done

bad=0
violation() { echo "layers: $1"; bad=1; }

while IFS= read -r f; do
    part=${f%%/*}
    while IFS=: read -r line inc; do
        case "$inc" in
        */*) target_stage=${inc%%/*}
             if [ "$part" != harness ]; then
                 violation "$f:$line includes \"$inc\": $part/ never includes the harness"
             elif [ "$(rank "$target_stage")" -lt 0 ]; then
                 violation "$f:$line includes \"$inc\": no harness stage named $target_stage"
             else
                 from=$(basename "$(dirname "$f")")
                 if [ "$(rank "$target_stage")" -lt "$(rank "$from")" ]; then
                     violation "$f:$line includes \"$inc\": $from/ may not include $target_stage/ (order: ${stages[*]})"
                 fi
             fi ;;
        *) o=${owner[$inc]:-}
           [ -z "$o" ] && [ "$part" = harness ] && [ -e "$(dirname "$f")/$inc" ] &&
               violation "$f:$line includes \"$inc\": name its stage (\"$(basename "$(dirname "$f")")/$inc\")"
           case "$part:$o" in
           common:engine|common:reference) violation "$f:$line includes \"$inc\": common/ depends on no part" ;;
           engine:reference) violation "$f:$line includes \"$inc\": the engine never sees the reference" ;;
           reference:engine) violation "$f:$line includes \"$inc\": the reference never sees the engine" ;;
           esac ;;
        esac
    done < <(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"' "$f" |
             sed -E 's/^([0-9]+):[^"]*"([^"]+)".*/\1:\2/')
done < <(find common engine reference harness -type f \( -name '*.[ch]' -o -name '*.cu' \) | sort)
[ "$bad" -eq 0 ] && echo "layers: ok (${stages[*]}; common, engine and reference apart)"
exit "$bad"
