"""The demo agent's settings and their trigger words (pure)."""

from __future__ import annotations

from ahpd.demo_agent import settings as st


def test_options_set_and_refused_in_the_agents_words() -> None:
    chosen = st.Settings()
    model, thinking = st.options(chosen)
    assert (model["category"], model["currentValue"]) == ("model", "demo-swift")
    assert (thinking["category"], thinking["currentValue"]) == ("thought_level", "medium")
    assert st.set_option(chosen, "model", "demo-deep") is None and chosen.model == "demo-deep"
    assert st.set_option(chosen, "thinking", "high") is None and chosen.effort == "high"
    assert (
        st.set_option(chosen, "model", "gpt-9") == "the demo agent has no model 'gpt-9'; it has demo-swift, demo-deep"
    )
    assert "no thinking level 'max'" in st.set_option(chosen, "thinking", "max")
    assert st.set_option(chosen, "colour", "red") == "the demo agent has no setting 'colour'"


def test_trigger_words() -> None:
    assert st.mode_asked("please switch to Mode auto now") == "auto"
    assert st.mode_asked("no such word") is None
    assert st.settings_asked("show me the SETTINGS") and not st.settings_asked("settle down")
    line = st.describe(st.Settings(additional=["/a", "/b"]), "default", "/w")
    assert line == (
        "Settings: model demo-swift, thinking medium, mode default, cwd /w, additional directories /a, /b.\n\n"
    )
