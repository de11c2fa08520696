# ahpd shell integration for bash, loaded with --rcfile in place of ~/.bashrc.
# The user's own rc file is read first, as an interactive bash would, and is
# never changed. Then the prompt reports, through OSC escape sequences the
# host cuts out of the output: 133;D;<exit code> (the last command finished),
# 7 (the working directory), 133;A (a prompt starts), 133;B (it ends: what
# follows is typed) and, from PS0, 133;C (the typed command runs).
if [ -r "$HOME/.bashrc" ]; then
    . "$HOME/.bashrc"
fi

__ahpd_prompt() {
    local status=$?
    printf '\033]133;D;%s\007\033]7;file://%s%s\007\033]133;A\007' \
        "$status" "${HOSTNAME:-localhost}" "${PWD//%/%25}"
    return $status
}

if [[ -z "$__ahpd_loaded" ]]; then
    __ahpd_loaded=1
    PROMPT_COMMAND="__ahpd_prompt${PROMPT_COMMAND:+; $PROMPT_COMMAND}"
    PS1="${PS1}\[\033]133;B\007\]"
    PS0="${PS0}"$'\033]133;C\007'
fi
