#!/usr/bin/env python3
"""Generate ``ahpd/protocol/model.py`` from the published AHP JSON Schemas.

The schemas are the authority on shapes, so the wire model is never written
by hand: this tool reads every ``$defs`` entry of the five schema files and
writes one plain slotted class per object, one enum per enumeration and one type
alias per union, plus the method and action tables the host dispatches on.
Descriptions are deliberately not carried over: the schema's prose is the
protocol's, not ours.

    python tools/gen_protocol.py            # rewrite the committed module
    python tools/gen_protocol.py --check    # exit 1 if it no longer matches
    python tools/gen_protocol.py --schema-dir DIR --output FILE

What the schemas do not say, and is therefore stated here:

* method names (the TypeScript ``CommandMap``/``NotificationMap`` keys) are
  derived from the ``…Params`` definitions, with a table for notifications;
* member names for the numeric enumerations (``SessionStatus`` bits, error
  codes), which the schema lists as bare numbers;
* which surface is experimental (newer than AHP 1.0.0 and not served).
"""

from __future__ import annotations

import argparse
import difflib
import json
import keyword
import re
import sys
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SCHEMA_DIR = ROOT.parent / "shared" / "ahp-spec" / "schema"
DEFAULT_OUTPUT = ROOT / "ahpd" / "protocol" / "model.py"
FITS_NAME = "fits.py"  # written beside the model (tools/gen_fits.py)
FAMILIES = ("state", "actions", "commands", "notifications", "errors")

# Definitions that have no wire shape of their own.
SKIPPED_DEFS = {
    # A TypeScript mapped type: its property names are computed keys such as
    # "[AhpErrorCodes.AuthRequired]", which never appear on the wire.
    "AhpErrorDetailsMap": "TypeScript mapped type with computed keys; not a wire shape",
    # The union of every notification's params has no discriminator; a
    # notification is selected by its JSON-RPC method instead.
    "ProtocolNotification": "undiscriminated union; notifications are selected by method",
}

# Where a published definition lost what its TypeScript source says. The
# boolean literals of the approved/denied tool-call confirmation came out of
# the schema generator as bare descriptions; without them the two variants of
# chat/toolCallConfirmed cannot be told apart.
ERRATA: dict[tuple[str, str], dict[str, Any]] = {
    ("ChatToolCallApprovedAction", "approved"): {"const": True},
    ("ChatToolCallDeniedAction", "approved"): {"const": False},
}

# Names for numeric enumerations, from the protocol's TypeScript types.
NUMERIC_ENUM_NAMES: dict[str, dict[int, str]] = {
    "SessionStatus": {
        1: "Idle",
        2: "Error",
        8: "InProgress",
        24: "InputNeeded",
        32: "IsRead",
        64: "IsArchived",
    },
    "JsonRpcErrorCode": {
        -32700: "ParseError",
        -32600: "InvalidRequest",
        -32601: "MethodNotFound",
        -32602: "InvalidParams",
        -32603: "InternalError",
    },
    "AhpErrorCode": {
        -32001: "SessionNotFound",
        -32002: "ProviderNotFound",
        -32003: "SessionAlreadyExists",
        -32004: "TurnInProgress",
        -32005: "UnsupportedProtocolVersion",
        -32007: "AuthRequired",
        -32008: "NotFound",
        -32009: "PermissionDenied",
        -32010: "AlreadyExists",
        -32011: "Conflict",
    },
}
# Bit sets: a value is any combination of members, not one of them.
FLAG_ENUMS = {"SessionStatus"}

# Server-to-client notifications whose method is not the params name.
NOTIFICATION_METHODS = {
    "SessionAddedParams": "root/sessionAdded",
    "SessionRemovedParams": "root/sessionRemoved",
    "SessionSummaryChangedParams": "root/sessionSummaryChanged",
    "ProgressParams": "root/progress",
    "AuthRequiredParams": "auth/required",
    "OtlpExportLogsParams": "otlp/exportLogs",
    "OtlpExportTracesParams": "otlp/exportTraces",
    "OtlpExportMetricsParams": "otlp/exportMetrics",
    "ChannelFrameParams": "channel/frame",
    "ChannelCreditParams": "channel/credit",
    "ChannelReadyParams": "channel/ready",
    "ChannelResetParams": "channel/reset",
    "ChannelSnapshotParams": "channel/snapshot",
    "TcpDataParams": "tcp/data",
    "TcpEofParams": "tcp/eof",
}
CLIENT_NOTIFICATIONS = {"unsubscribe": "UnsubscribeParams", "dispatchAction": "DispatchActionParams"}
# Commands a host may also send to a client (the symmetric resource family).
SERVER_COMMANDS = (
    "resourceRead",
    "resourceWrite",
    "resourceList",
    "resourceCopy",
    "resourceDelete",
    "resourceMove",
    "resourceResolve",
    "resourceMkdir",
    "resourceRequest",
    "createResourceWatch",
)
# Params definitions that are not commands of their own.
NOT_COMMAND_PARAMS = {"BaseParams", "PaginatedParams"}
# Newer than AHP 1.0.0: modelled, not served.
EXPERIMENTAL = (
    "channelDeliveryResume",
    "createTcpConnection",
    "channel/frame",
    "channel/credit",
    "channel/ready",
    "channel/reset",
    "channel/snapshot",
    "tcp/data",
    "tcp/eof",
    "chat/canvasesChanged",
    "chat/changesetsChanged",
    "canvas/stateChanged",
)

HEADER = '''\
# Generated by tools/gen_protocol.py from the AHP JSON Schemas. Do not edit.
# Regenerate with `python tools/gen_protocol.py`; CI runs it with --check.
"""The AHP wire model: one class per schema definition (generated)."""

from __future__ import annotations

import enum
from typing import Any, Literal, Union

from ahpd.protocol._base import CONST_KIND as _C
from ahpd.protocol._base import OPTIONAL as _O
from ahpd.protocol._base import REQUIRED as _R
from ahpd.protocol._base import Model, Number
from ahpd.protocol._base import _set

'''


def pascal(word: str) -> str:
    parts = re.split(r"[^0-9A-Za-z]+", word)
    return "".join(p[:1].upper() + p[1:] for p in parts if p)


def member_name(value: Any) -> str:
    """An enum member name for a wire value: ``not-needed`` -> ``NOT_NEEDED``."""
    text = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", str(value))
    text = re.sub(r"[^0-9A-Za-z]+", "_", text).strip("_").upper()
    if not text or text[0].isdigit() or keyword.iskeyword(text):
        text = "V_" + text
    return text


class Generator:
    def __init__(self, schema_dir: Path) -> None:
        self.defs: dict[str, dict[str, Any]] = {}
        self.family: dict[str, str] = {}
        for family in FAMILIES:
            doc = json.loads((schema_dir / f"{family}.schema.json").read_text())
            for name, schema in doc["$defs"].items():
                # The first file to declare a name owns it; later copies are the
                # same definition re-exported (StateAction differs only in
                # carrying one broken member, dropped below).
                self.defs.setdefault(name, schema)
                self.family.setdefault(name, family)
        self.blocks: list[str] = []  # classes and enums: no evaluation order
        self.aliases: list[str] = []  # evaluated at import: after what they name
        self.emitted: set[str] = set()
        self.class_count = 0
        self.enum_count = 0
        self.alias_count = 0

    # -- type expressions --------------------------------------------------

    def ref_name(self, ref: str) -> str | None:
        name = ref.rsplit("/", 1)[-1]
        return name or None

    def type_expr(self, schema: dict[str, Any], hint: str) -> str:
        """A Python type for ``schema``; ``hint`` names any class it needs."""
        if schema is True:
            return "Any"
        schema = {k: v for k, v in schema.items() if k not in ("description", "title")}
        if not schema:
            return "Any"
        if "$ref" in schema:
            name = self.ref_name(schema["$ref"])
            self.ensure(name)
            return name
        if "const" in schema:
            return f"Literal[{schema['const']!r}]"
        if "enum" in schema:
            return "Literal[" + ", ".join(repr(v) for v in schema["enum"]) + "]"
        if "oneOf" in schema:
            return self.union_expr(schema["oneOf"], hint)
        kind = schema.get("type")
        if kind == "string":
            return "str"
        if kind == "number":
            return "Number"
        if kind == "integer":
            return "int"
        if kind == "boolean":
            return "bool"
        if kind == "null":
            return "None"
        if kind == "array":
            return f"list[{self.type_expr(schema.get('items', {}), hint + 'Item')}]"
        if kind == "object":
            if "properties" in schema:
                self.emit_class(hint, schema)
                return hint
            extra = schema.get("additionalProperties", {})
            return f"dict[str, {self.type_expr(extra, hint + 'Value')}]"
        raise ValueError(f"{hint}: unsupported schema {json.dumps(schema)[:200]}")

    def union_expr(self, members: list[dict[str, Any]], hint: str) -> str:
        if all("const" in m and len(m) == 1 for m in members):
            return "Literal[" + ", ".join(repr(m["const"]) for m in members) + "]"
        parts: list[str] = []
        for index, member in enumerate(members):
            if "$ref" in member and not self.ref_name(member["$ref"]):
                continue  # a dangling "#/$defs/" entry in the published schema
            sub = hint + self.variant_suffix(member, index)
            expr = self.type_expr(member, sub)
            if expr not in parts:
                parts.append(expr)
        return parts[0] if len(parts) == 1 else "Union[" + ", ".join(parts) + "]"

    @staticmethod
    def variant_suffix(member: dict[str, Any], index: int) -> str:
        for prop in member.get("properties", {}).values():
            if "const" in prop:
                return pascal(str(prop["const"]))
        return f"V{index}"

    # -- definitions -------------------------------------------------------

    def ensure(self, name: str) -> None:
        if name in self.emitted or name in SKIPPED_DEFS:
            return
        if name not in self.defs:
            raise KeyError(f"reference to unknown definition {name!r}")
        self.emitted.add(name)
        schema = self.defs[name]
        if "enum" in schema:
            self.emit_enum(name, schema)
        elif schema.get("type") == "object" and "properties" in schema:
            self.emit_class(name, schema)
        else:
            expr = self.type_expr(schema, name)
            self.aliases.append(f"{name} = {expr}\n")
            self.alias_count += 1

    def emit_enum(self, name: str, schema: dict[str, Any]) -> None:
        values = schema["enum"]
        self.enum_count += 1
        if name in NUMERIC_ENUM_NAMES:
            names = NUMERIC_ENUM_NAMES[name]
            missing = [v for v in values if v not in names]
            if missing:
                raise KeyError(f"{name}: no member name for {missing}; add it to NUMERIC_ENUM_NAMES")
            base = "enum.IntFlag" if name in FLAG_ENUMS else "enum.IntEnum"
            lines = [f"class {name}({base}):"]
            lines += [f"    {names[v]} = {v}" for v in values]
        else:
            lines = [f"class {name}(enum.StrEnum):"]
            lines += [f"    {member_name(v)} = {v!r}" for v in values]
        self.blocks.append("\n".join(lines) + "\n")

    def emit_class(self, name: str, schema: dict[str, Any]) -> None:
        """A plain slotted class with its ``__init__`` written out (see ``_base``)."""
        required = set(schema.get("required", ()))
        annotations: list[str] = []
        specs: list[str] = []
        params: list[str] = []
        body: list[str] = []
        aliases: set[str] = set()
        for prop, sub in schema["properties"].items():
            sub = ERRATA.get((name, prop), sub)
            if not prop.isidentifier() or keyword.iskeyword(prop) or prop in ("self", "_set"):
                raise ValueError(f"{name}.{prop}: not a usable Python identifier")
            alias = prop.lstrip("_")  # the keyword, as attrs spelled it: _meta= is meta=
            if alias in aliases or not alias:
                raise ValueError(f"{name}.{prop}: its keyword {alias!r} is taken")
            aliases.add(alias)
            constraints = {k: sub[k] for k in ("minimum", "maximum", "minLength", "minItems", "maxItems") if k in sub}
            if "const" in sub:
                value = sub["const"]
                annotations.append(f"    {prop}: Literal[{value!r}]")
                specs.append(f"({prop!r}, _C, {value!r})")
                params.append(f"{alias}: Literal[{value!r}] = {value!r}")
                differs = "is not" if isinstance(value, bool) else "!="
                message = f"{prop} must be {value!r}, got "
                body.append(f"        if {alias} {differs} {value!r}:")
                body.append(f"            raise ValueError({message!r} + repr({alias}))")
                body.append(f"        _set(self, {prop!r}, {alias})")
                continue
            expr = self.type_expr(sub, name + pascal(prop))
            extra = repr(constraints) if constraints else "None"
            if prop in required:
                annotations.append(f"    {prop}: {expr}")
                specs.append(f"({prop!r}, _R, {extra})")
                params.append(f"{alias}: {expr}")
            else:
                annotations.append(f"    {prop}: {expr} | None")
                specs.append(f"({prop!r}, _O, {extra})")
                params.append(f"{alias}: {expr} | None = None")
            body.append(f"        _set(self, {prop!r}, {alias})")
        self.class_count += 1
        lines = [f"class {name}(Model):"]
        slots = ", ".join(repr(p) for p in schema["properties"])
        lines.append(f"    __slots__ = ({slots}{',' if len(schema['properties']) == 1 else ''})")
        if specs:
            lines.append("    __fields__ = (")
            lines += [f"        {s}," for s in specs]
            lines.append("    )")
            lines += annotations
            lines.append("")
            lines.append(f"    def __init__(self, *, {', '.join(params)}) -> None:")
            lines += body
        self.blocks.append("\n".join(lines) + "\n")

    # -- tables ------------------------------------------------------------

    def action_types(self) -> dict[str, str]:
        """Action ``type`` -> the class (or union) that decodes it."""
        out: dict[str, str] = {}

        def walk(name: str) -> None:
            schema = self.defs[name]
            if "oneOf" in schema:
                consts = set()
                for member in schema["oneOf"]:
                    sub = self.ref_name(member.get("$ref", "")) if "$ref" in member else None
                    if sub:
                        consts.add(self.defs[sub]["properties"]["type"]["const"])
                if len(consts) == 1:  # one type, several shapes (approved/denied)
                    out[consts.pop()] = name
                    return
                for member in schema["oneOf"]:
                    sub = self.ref_name(member.get("$ref", ""))
                    if sub:
                        walk(sub)
                return
            out[schema["properties"]["type"]["const"]] = name

        for member in self.defs["StateAction"]["oneOf"]:
            name = self.ref_name(member["$ref"])
            if name:
                walk(name)
        return out

    def commands(self) -> dict[str, tuple[str, str | None]]:
        out: dict[str, tuple[str, str | None]] = {}
        for name, family in self.family.items():
            if family != "commands" or not name.endswith("Params") or name in NOT_COMMAND_PARAMS:
                continue
            if name in CLIENT_NOTIFICATIONS.values():
                continue
            stem = name[: -len("Params")]
            if stem + "Result" not in self.defs and stem + "Params" not in self.defs:
                continue
            method = stem[0].lower() + stem[1:]
            result = stem + "Result" if stem + "Result" in self.defs else None
            out[method] = (name, result)
        return dict(sorted(out.items()))

    # -- output ------------------------------------------------------------

    def render(self) -> str:
        for name in self.defs:
            self.ensure(name)
        actions = self.action_types()
        commands = self.commands()
        for method in SERVER_COMMANDS:
            if method not in commands:
                raise KeyError(f"server command {method} has no params definition")
        notifications = {"action": "ActionEnvelope"}
        for params, method in NOTIFICATION_METHODS.items():
            if params not in self.defs:
                raise KeyError(f"notification params {params} missing from the schema")
            notifications[method] = params
        unknown = {
            n
            for n, f in self.family.items()
            if f == "notifications" and n.endswith("Params") and n not in NOTIFICATION_METHODS
        }
        if unknown:
            raise KeyError(f"notification params without a method: {sorted(unknown)}")

        out = [HEADER]
        out.append("\n\n".join(self.blocks))
        out.append("\n\n# -- aliases --------------------------------------------------------------\n\n")
        out.append("".join(self.aliases))
        out.append("\n\n# -- tables ---------------------------------------------------------------\n")
        out.append("\n#: Action ``type`` -> the class that decodes it.\nACTIONS: dict[str, Any] = {\n")
        out += [f"    {t!r}: {c},\n" for t, c in actions.items()]
        out.append("}\n\n#: Client-to-server command -> (params class, result class or None).\n")
        out.append("COMMANDS: dict[str, tuple[type, Any]] = {\n")
        out += [f"    {m!r}: ({p}, {r}),\n" for m, (p, r) in commands.items()]
        out.append("}\n\n#: Commands a host may send to a client (the symmetric resource family).\n")
        out.append("SERVER_COMMANDS: dict[str, tuple[type, Any]] = {\n")
        out += [f"    {m!r}: COMMANDS[{m!r}],\n" for m in SERVER_COMMANDS]
        out.append("}\n\n#: Client-to-server notification -> params class.\n")
        out.append("CLIENT_NOTIFICATIONS: dict[str, type] = {\n")
        out += [f"    {m!r}: {p},\n" for m, p in CLIENT_NOTIFICATIONS.items()]
        out.append("}\n\n#: Server-to-client notification -> params class.\n")
        out.append("SERVER_NOTIFICATIONS: dict[str, type] = {\n")
        out += [f"    {m!r}: {p},\n" for m, p in notifications.items()]
        out.append("}\n\n#: Surface newer than AHP 1.0.0: modelled, never served.\n")
        out.append("EXPERIMENTAL: frozenset[str] = frozenset({\n")
        out += [f"    {m!r},\n" for m in EXPERIMENTAL]
        out.append("})\n\n#: Schema definitions not generated, and why.\n")
        out.append("SKIPPED: dict[str, str] = {\n")
        out += [f"    {n!r}: {why!r},\n" for n, why in SKIPPED_DEFS.items()]
        out.append("}\n\n")
        out.append(
            f"#: Counts, for the record: {self.class_count} classes, {self.enum_count} enums, "
            f"{self.alias_count} aliases.\n"
        )
        return "".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schema-dir", type=Path, default=DEFAULT_SCHEMA_DIR)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed model is stale")
    args = parser.parse_args(argv)
    missing = [f for f in FAMILIES if not (args.schema_dir / f"{f}.schema.json").is_file()]
    if missing:
        # The published schemas are upstream's text and live beside the
        # repository, never in it: say where they were looked for.
        parser.error(f"no AHP schemas in {args.schema_dir} (missing {', '.join(missing)}); pass --schema-dir DIR")
    gen = Generator(args.schema_dir)
    text = gen.render()
    outputs = {args.output: text, args.output.with_name(FITS_NAME): render_fits(text)}
    if args.check:
        stale = False
        for path, wanted in outputs.items():
            current = path.read_text() if path.exists() else ""
            if current != wanted:
                diff = difflib.unified_diff(
                    current.splitlines(True), wanted.splitlines(True), str(path), "regenerated", n=1
                )
                sys.stdout.writelines(list(diff)[:80])
                print(f"\n{path} is stale: run python tools/gen_protocol.py", file=sys.stderr)
                stale = True
        if stale:
            return 1
        print(
            f"{args.output.name} matches the schema ({gen.class_count} classes, "
            f"{gen.enum_count} enums, {gen.alias_count} aliases), and {FITS_NAME} the model"
        )
        return 0
    for path, wanted in outputs.items():
        path.write_text(wanted)
    print(f"wrote {args.output} ({gen.class_count} classes, {gen.enum_count} enums, {gen.alias_count} aliases)")
    print(f"wrote {args.output.with_name(FITS_NAME)}")
    return 0


def render_fits(model_text: str) -> str:
    """``fits.py`` for the model ``model_text``: the model is run as
    ``ahpd.protocol.model`` for the while, so that its annotations resolve."""
    sys.path.insert(0, str(ROOT))
    from ahpd.protocol import _base  # the package the model is written in

    from gen_fits import FitsGenerator  # beside this script

    module = types.ModuleType("ahpd.protocol.model")
    saved = sys.modules.get(module.__name__)
    sys.modules[module.__name__] = module
    try:
        exec(compile(model_text, "<model>", "exec"), module.__dict__)
        return FitsGenerator(module, _base).render()
    finally:
        if saved is not None:
            sys.modules[module.__name__] = saved
        else:
            del sys.modules[module.__name__]


if __name__ == "__main__":
    sys.exit(main())
