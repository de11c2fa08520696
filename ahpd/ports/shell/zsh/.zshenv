# ahpd shell integration for zsh: ZDOTDIR points here only so that zsh reads
# the .zshrc beside this file; the user's own startup files are read from
# where they are (AHPD_USER_ZDOTDIR) and never changed.
if [[ -r "${AHPD_USER_ZDOTDIR:-$HOME}/.zshenv" ]]; then
    ZDOTDIR="${AHPD_USER_ZDOTDIR:-$HOME}" source "${AHPD_USER_ZDOTDIR:-$HOME}/.zshenv"
fi
