# ahpd shell integration for zsh (see .zshenv): the user's own .zshrc first,
# then the marks the host reads back: OSC 133;D;<exit code>, 7 (the working
# directory), 133;A before the prompt, 133;B at its end, 133;C before a
# command runs.
__ahpd_here="$ZDOTDIR"
ZDOTDIR="${AHPD_USER_ZDOTDIR:-$HOME}"
if [[ -r "$ZDOTDIR/.zshrc" ]]; then
    source "$ZDOTDIR/.zshrc"
fi
unset AHPD_USER_ZDOTDIR

__ahpd_precmd() {
    local ahpd_status=$?
    printf '\033]133;D;%s\007\033]7;file://%s%s\007\033]133;A\007' \
        "$ahpd_status" "${HOST:-localhost}" "${PWD//\%/%25}"
    if [[ "$PS1" != *$'\033]133;B'* ]]; then
        PS1="${PS1}%{"$'\033]133;B\007'"%}"
    fi
}
__ahpd_preexec() {
    printf '\033]133;C\007'
}
autoload -Uz add-zsh-hook
add-zsh-hook precmd __ahpd_precmd
add-zsh-hook preexec __ahpd_preexec
