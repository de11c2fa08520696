"""The host's own tools as offered: their names, input schemas and words.

The reference host's set, under the same names and input schemas, so a
skill written for VS Code's agent host runs here: the session tools, the
artifact three and ``ahp_resource``. Only what an agent is told is here -
the ``ToolDefinition`` list, the bounds its schemas state, the sentence a
harness appends for the artifact tools - cut out from the code that runs
each tool (``session_tools``, ``artifact_tools``, ``server_tools``) because
it is data the reference defines, and long.
"""

from __future__ import annotations

from typing import Any

#: Where a session's artifacts and references are kept (session ``_meta`` and its row).
ARTIFACTS = "agentHost/sessionArtifacts"
ARTIFACT_TYPES = ("pullRequest", "issue", "commit", "website", "file", "resource")
#: The ``resource*`` commands ``ahp_resource`` carries (every one but the watch).
RESOURCE_METHODS = (
    "resourceRead",
    "resourceList",
    "resourceResolve",
    "resourceWrite",
    "resourceDelete",
    "resourceMkdir",
    "resourceMove",
    "resourceCopy",
    "resourceRequest",
)
STATUS_WORDS = ("idle", "inProgress", "inputNeeded", "error", "archived")
TRANSCRIPT_LIMIT, TRANSCRIPT_CAP = 10, 50
#: The tools a harness that asks before a tool runs asks about (the reference's four).
CONFIRMED = frozenset({"create_session", "create_chat", "send_message", "delete_session"})
#: The session ``_meta`` key saying how many ``create_session`` calls deep a
#: session was made (the reference host's key), and how deep one may be.
SPAWN_DEPTH = "agentHost/sessionSpawnDepth"
MAX_SPAWN_DEPTH = 3
#: The longest title ``rename_chat`` takes (the reference schema's bound).
TITLE_MAX = 200


def _s(description: str, **more: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **more}


def _b(description: str) -> dict[str, Any]:
    return {"type": "boolean", "description": description}


_SESSION_REF = "a session URI from `list_sessions`"

SESSION_TOOLS: list[dict[str, Any]] = [
    {
        "name": "list_sessions",
        "title": "List Sessions",
        "description": "The sessions on this host, one short record each: status, what it is doing, its folder, "
        "project, git facts and times. `session` narrows it to one. Archived sessions appear only "
        "when asked for.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "session": _s("One session by its URI; the other filters are then ignored."),
                "status": {
                    "type": "array",
                    "items": {"type": "string", "enum": list(STATUS_WORDS)},
                    "description": "Keep sessions in any of these states (asking for `archived` "
                    "also turns on `includeArchived`).",
                },
                "workspace": _s("Keep sessions working in this folder (a path from the root, or a URI)."),
                "withChanges": _b("Keep sessions whose tree has changes nobody committed."),
                "unread": _b("Keep sessions with news the user has not read."),
                "withPullRequest": _b("Keep sessions tied to a pull request."),
                "includeArchived": _b("List archived sessions too (off unless set)."),
                "createdAfter": _s("Keep sessions begun no earlier than this ISO-8601 time."),
                "createdBefore": _s("Keep sessions begun no later than this ISO-8601 time."),
            },
        },
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "get_current_session",
        "title": "Get Current Session",
        "description": "The record of the session you are running in.",
        "inputSchema": {"type": "object", "properties": {}},
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "create_session",
        "title": "Create Session",
        "description": "Open a new session in a folder and give it its first message.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "workspace": _s(
                    "Where it works: a folder path from the root, a workspace URI, or a folder another "
                    "session works in."
                ),
                "prompt": _s("The first message the new session receives."),
                "model": _s("A model to use, by id or by name (optional)."),
            },
            "required": ["workspace", "prompt"],
        },
        "annotations": {"readOnlyHint": False},
    },
    {
        "name": "create_chat",
        "title": "Create Chat",
        "description": "Open another chat in a session (yours unless `session` names one) and give it its first "
        "message.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "session": _s(f"The session to open it in: {_SESSION_REF}. Yours when left out."),
                "prompt": _s("The first message the new chat receives."),
                "title": _s("A title for the chat (optional)."),
                "model": _s("A model to use, by id or by name; the session's when left out."),
            },
            "required": ["prompt"],
        },
        "annotations": {"readOnlyHint": False},
    },
    {
        "name": "rename_chat",
        "title": "Rename Chat",
        "description": "Give a chat a short title it can be found by, a few words (yours unless `chat` names "
        "another). A session that has no chat but its default one takes the title too.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "session": _s(
                    f"The session the chat is in: {_SESSION_REF}. Given with `chat`, it must be that chat's."
                ),
                "chat": _s("The chat to rename: a chat URI, or a session's (its default chat). Yours when left out."),
                "title": {**_s("The new title, a few words."), "maxLength": TITLE_MAX},
            },
            "required": ["title"],
        },
        "annotations": {"readOnlyHint": False},
    },
    {
        "name": "send_message",
        "title": "Send Message",
        "description": "Say something to another session or chat: it starts a turn there, or waits behind the one "
        "running. Returns at once; the answer is not awaited.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "session": _s(f"Who to tell: {_SESSION_REF}, or a chat URI."),
                "message": _s("What to say."),
            },
            "required": ["session", "message"],
        },
        "annotations": {"readOnlyHint": False},
    },
    {
        "name": "get_session_context",
        "title": "Get Session Context",
        "description": "The latest turns of a session or chat, as a shortened transcript.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "session": _s(f"Whose turns: {_SESSION_REF}, or a chat URI."),
                "detail": {
                    "type": "string",
                    "enum": ["summary", "digest", "full"],
                    "description": "How much of each turn: `summary` (the default) gives the message and the "
                    "start of the answer, `digest` the whole answer and the tools called, "
                    "`full` the tools' inputs as well.",
                },
                "transcriptLimit": {
                    "type": "number",
                    "description": "How many of the newest turns (10 unless set, 50 at most).",
                },
            },
            "required": ["session"],
        },
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "delete_session",
        "title": "Delete Session",
        "description": "Remove a session and everything stored for it, for good. Your own session cannot be removed.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "session": _s(f"The session to remove: {_SESSION_REF}."),
            },
            "required": ["session"],
        },
        "annotations": {"readOnlyHint": False, "destructiveHint": True},
    },
]

_ARTIFACT_ITEM = {
    "type": "object",
    "properties": {
        "type": _s("What it is; `resource` is for what fits no other kind.", enum=list(ARTIFACT_TYPES)),
        "label": _s("A few words the user sees."),
        "isArtifact": _b(
            "Always given: `true` when this session made or changed it (an artifact), "
            "`false` for something that already existed and is worth a look (a reference)."
        ),
        "link": _s("Its URL, needed for a pull request, issue, commit or website."),
        "uri": _s(
            "Its full URI with the scheme (`file:///...` for a file here), needed for the `file` and `resource` kinds."
        ),
        "commitHash": _s("The commit's hash, needed for the `commit` kind."),
    },
    "required": ["type", "label", "isArtifact"],
}

ARTIFACT_TOOLS: list[dict[str, Any]] = [
    {
        "name": "add_artifact_or_reference",
        "title": "Add Artifact or Reference",
        "description": "Note things this session made or found, so the user sees them beside the chat input. "
        "Give related ones together. Only results worth keeping belong here, not scratch "
        "files.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "items": {"type": "array", "minItems": 1, "items": _ARTIFACT_ITEM, "description": "What to note."},
            },
            "required": ["items"],
        },
        "annotations": {"readOnlyHint": False},
    },
    {
        "name": "remove_artifact_or_reference",
        "title": "Remove Artifact or Reference",
        "description": "Take a noted artifact or reference off this session, by its id.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "id": _s("Its id, as `add_artifact_or_reference` or `list_artifacts_and_references` gave it."),
            },
            "required": ["id"],
        },
        "annotations": {"readOnlyHint": False, "destructiveHint": True},
    },
    {
        "name": "list_artifacts_and_references",
        "title": "List Artifacts and References",
        "description": "What this session has noted, each with its id.",
        "inputSchema": {"type": "object", "properties": {}},
        "annotations": {"readOnlyHint": True},
    },
]

AHP_RESOURCE: dict[str, Any] = {
    "name": "ahp_resource",
    "title": "AHP Resource",
    "description": "Reach a resource through the agent host, the way its clients do: `method` is one of the "
    "AHP resource commands and `params` its params (`uri`, ...). A `file:` URI is this "
    "machine's file; `<scheme>://<clientId>/...` is a resource a connected client publishes "
    "(an editor's unsaved buffer, a plugin's virtual file). Answers the command's result as JSON.",
    "inputSchema": {
        "type": "object",
        "properties": {
            "method": _s("The resource command.", enum=list(RESOURCE_METHODS)),
            "params": {"type": "object", "description": 'The command\'s params, e.g. {"uri": "file:///tmp/a"}.'},
        },
        "required": ["method", "params"],
    },
    "annotations": {"readOnlyHint": False},
}

#: Said to an agent whose harness takes it (Claude Code's system prompt append).
ARTIFACT_INSTRUCTION = (
    "This agent host shows notable results beside the chat input. When you create, or work to fix, change or "
    "unblock, a pull request or an issue, or produce a deliverable the user asked for (a report, a plan), record "
    "it with the `add_artifact_or_reference` tool as an artifact; record an existing resource the user should "
    "look at because of this task as a reference. Recording is optional: do not record routine, scratch or "
    "intermediate files, nor sessions and chats you created with the session tools, and never make a file only "
    "to record it. Batch related entries in one call."
)

DEFAULT_TOOLS: list[dict[str, Any]] = [*SESSION_TOOLS, *ARTIFACT_TOOLS, AHP_RESOURCE]
