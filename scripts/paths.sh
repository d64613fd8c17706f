# paths.sh — sourced by the scripts: the folders kvdrift's C code names with lm_cache_dir and
# lm_models_dir (common/fs.h), by the same rules.
#   kvd_cache   $KVDRIFT_CACHE, else $XDG_CACHE_HOME/kvdrift, else $HOME/.cache/kvdrift
#   kvd_models  $KVDRIFT_MODELS, else $kvd_cache/models (where scripts/models.sh downloads)
kvd_cache="${KVDRIFT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kvdrift}"
kvd_models="${KVDRIFT_MODELS:-$kvd_cache/models}"
