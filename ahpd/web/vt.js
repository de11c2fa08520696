// A small screen-buffer terminal emulator of our own: enough of ECMA-48 and
// xterm for a shell, `top` and a progress bar. A grid of cells (a character
// and its attributes), a cursor, a scroll region, a main and an alternate
// screen, and a parser that keeps its state between chunks (an escape
// sequence may arrive split). What it knows:
//   C0: BEL, BS, HT, LF/VT/FF, CR; ESC 7/8 (save/restore), ESC D/E/M, ESC c
//   CSI: CUU CUD CUF CUB CNL CPL CHA CUP HVP VPA ED EL ECH ICH DCH IL DL SU SD
//        DECSTBM, SGR (16, 256 and truecolour, bold, dim, italic, underline,
//        inverse), DECSET/DECRST 25 (cursor), 47/1047/1049 (alternate screen)
//   OSC: the window title (0/2); other OSC and DCS strings are skipped.
//   Character sets: G0 as ASCII or DEC Special Graphics (ESC ( B / ESC ( 0),
//   SI/SO between G0 and G1 (ESC ) 0).

// DEC Special Graphics (ESC ( 0): the line-drawing set full-screen programs draw boxes with.
const DEC_GRAPHICS = {
  j: "┘", k: "┐", l: "┌", m: "└", n: "┼", q: "─", t: "├", u: "┤", v: "┴", w: "┬", x: "│",
  a: "▒", f: "°", g: "±", "~": "·", o: "⎺", s: "⎽", "`": "◆", y: "≤", z: "≥", "{": "π", "|": "≠", "}": "£",
};

const BLANK = Object.freeze({ fg: null, bg: null, bold: false, dim: false, italic: false, underline: false, inverse: false });

function blankRow(cols) {
  const row = new Array(cols);
  for (let i = 0; i < cols; i++) row[i] = { ch: " ", a: BLANK };
  return row;
}

export const PALETTE = [
  "#000000", "#cd3131", "#0dbc79", "#e5e510", "#2472c8", "#bc3fbc", "#11a8cd", "#e5e5e5",
  "#666666", "#f14c4c", "#23d18b", "#f5f543", "#3b8eea", "#d670d6", "#29b8db", "#ffffff",
];

// The colour of xterm's 256-colour index `n`, as CSS.
export function color256(n) {
  if (n < 16) return PALETTE[n];
  if (n < 232) {
    const v = n - 16;
    const step = (x) => (x === 0 ? 0 : 55 + x * 40);
    return `rgb(${step(Math.floor(v / 36))},${step(Math.floor(v / 6) % 6)},${step(v % 6)})`;
  }
  const g = 8 + (n - 232) * 10;
  return `rgb(${g},${g},${g})`;
}

export class Screen {
  constructor(cols = 80, rows = 24) {
    this.cols = cols;
    this.rows = rows;
    this.title = "";
    this.main = this.makeBuffer();
    this.alt = null;
    this.buf = this.main;
    this.attr = BLANK;
    this.cursorVisible = true;
    this.state = "ground";
    this.params = "";
    this.osc = "";
    this.changed = true;
    this.charsets = ["B", "B"]; // G0, G1
    this.shifted = 0; // SO selects G1, SI G0
    this.designating = 0;
  }

  makeBuffer() {
    const lines = [];
    for (let i = 0; i < this.rows; i++) lines.push(blankRow(this.cols));
    return { lines, x: 0, y: 0, top: 0, bottom: this.rows - 1, saved: null, scrollback: [] };
  }

  get alternate() {
    return this.buf !== this.main;
  }

  // -- output --------------------------------------------------------------------

  write(text) {
    for (const ch of text) this.feed(ch);
    this.changed = true;
  }

  feed(ch) {
    const code = ch.codePointAt(0);
    switch (this.state) {
      case "ground":
        if (code === 0x1b) this.state = "esc";
        else if (code < 0x20 || code === 0x7f) this.control(code);
        else this.print(ch);
        return;
      case "esc":
        this.escape(ch);
        return;
      case "csi":
        if (code >= 0x40 && code <= 0x7e) {
          this.state = "ground";
          this.csi(ch, this.params);
        } else if (code === 0x1b) this.state = "esc";
        else this.params += ch;
        return;
      case "osc":
        if (code === 0x07) this.endOsc();
        else if (code === 0x1b) this.state = "osc-esc";
        else if (this.osc.length < 4096) this.osc += ch;
        return;
      case "osc-esc":
        if (ch === "\\") this.endOsc();
        else this.state = "osc";
        return;
      case "string": // DCS, SOS, PM, APC: skipped to their ST
        if (code === 0x1b) this.state = "string-esc";
        else if (code === 0x07) this.state = "ground";
        return;
      case "string-esc":
        this.state = ch === "\\" ? "ground" : "string";
        return;
      case "charset":
        this.state = "ground";
        this.charsets[this.designating] = ch;
        return;
      default:
        this.state = "ground";
    }
  }

  endOsc() {
    this.state = "ground";
    const [kind, ...rest] = this.osc.split(";");
    if (kind === "0" || kind === "2") this.title = rest.join(";");
    this.osc = "";
  }

  control(code) {
    const b = this.buf;
    if (code === 0x08) b.x = Math.max(0, Math.min(b.x, this.cols - 1) - 1);
    else if (code === 0x09) b.x = Math.min(this.cols - 1, (Math.floor(b.x / 8) + 1) * 8);
    else if (code === 0x0a || code === 0x0b || code === 0x0c) this.lineFeed();
    else if (code === 0x0d) b.x = 0;
    else if (code === 0x0e) this.shifted = 1;
    else if (code === 0x0f) this.shifted = 0;
  }

  escape(ch) {
    this.state = "ground";
    const b = this.buf;
    if (ch === "[") {
      this.state = "csi";
      this.params = "";
    } else if (ch === "]") {
      this.state = "osc";
      this.osc = "";
    } else if ("P_^X".includes(ch)) this.state = "string";
    else if ("()*+".includes(ch)) {
      this.state = "charset";
      this.designating = ch === ")" ? 1 : ch === "(" ? 0 : 2;
    }
    else if (ch === "7") b.saved = { x: b.x, y: b.y, attr: this.attr };
    else if (ch === "8") this.restore();
    else if (ch === "D") this.lineFeed();
    else if (ch === "E") {
      b.x = 0;
      this.lineFeed();
    } else if (ch === "M") this.reverseIndex();
    else if (ch === "c") this.reset();
  }

  reset() {
    this.charsets = ["B", "B"];
    this.shifted = 0;
    this.main = this.makeBuffer();
    this.buf = this.main;
    this.alt = null;
    this.attr = BLANK;
    this.cursorVisible = true;
  }

  restore() {
    const b = this.buf;
    if (!b.saved) return;
    b.x = b.saved.x;
    b.y = b.saved.y;
    this.attr = b.saved.attr;
  }

  print(ch) {
    const b = this.buf;
    if (this.charsets[this.shifted] === "0" && DEC_GRAPHICS[ch]) ch = DEC_GRAPHICS[ch];
    if (b.x >= this.cols) {
      b.x = 0;
      this.lineFeed();
    }
    b.lines[b.y][b.x] = { ch, a: this.attr };
    b.x += 1; // may stand at cols: the next printable wraps (as xterm's pending wrap)
  }

  lineFeed() {
    const b = this.buf;
    if (b.y === b.bottom) this.scrollUp(1);
    else if (b.y < this.rows - 1) b.y += 1;
  }

  reverseIndex() {
    const b = this.buf;
    if (b.y === b.top) this.scrollDown(1);
    else if (b.y > 0) b.y -= 1;
  }

  scrollUp(n) {
    const b = this.buf;
    for (let i = 0; i < n; i++) {
      const gone = b.lines.splice(b.top, 1)[0];
      if (!this.alternate && b.top === 0) {
        b.scrollback.push(gone);
        if (b.scrollback.length > 1000) b.scrollback.shift();
      }
      b.lines.splice(b.bottom, 0, blankRow(this.cols));
    }
  }

  scrollDown(n) {
    const b = this.buf;
    for (let i = 0; i < n; i++) {
      b.lines.splice(b.bottom, 1);
      b.lines.splice(b.top, 0, blankRow(this.cols));
    }
  }

  // -- CSI ----------------------------------------------------------------------

  csi(final, raw) {
    const priv = raw.startsWith("?");
    const body = priv || raw.startsWith(">") || raw.startsWith("=") ? raw.slice(1) : raw;
    const args = body.split(";").map((p) => (p === "" ? NaN : parseInt(p, 10)));
    const n = (i, d = 1) => (Number.isNaN(args[i]) || args[i] === undefined || args[i] === 0 ? d : args[i]);
    const b = this.buf;
    const clampX = () => (b.x = Math.max(0, Math.min(this.cols - 1, b.x)));
    const clampY = () => (b.y = Math.max(0, Math.min(this.rows - 1, b.y)));
    if (priv && (final === "h" || final === "l")) {
      for (const mode of args) this.mode(mode, final === "h");
      return;
    }
    switch (final) {
      case "A": b.y = Math.max(b.y >= b.top ? b.top : 0, b.y - n(0)); clampX(); break;
      case "B": b.y = Math.min(b.y <= b.bottom ? b.bottom : this.rows - 1, b.y + n(0)); clampX(); break;
      case "C": case "a": b.x = Math.min(this.cols - 1, b.x + n(0)); break;
      case "D": clampX(); b.x = Math.max(0, b.x - n(0)); break;
      case "E": b.x = 0; b.y += n(0); clampY(); break;
      case "F": b.x = 0; b.y -= n(0); clampY(); break;
      case "G": case "`": b.x = n(0) - 1; clampX(); break;
      case "d": b.y = n(0) - 1; clampY(); break;
      case "H": case "f": b.y = n(0) - 1; b.x = n(1) - 1; clampX(); clampY(); break;
      case "J": this.eraseDisplay(Number.isNaN(args[0]) ? 0 : args[0]); break;
      case "K": this.eraseLine(Number.isNaN(args[0]) ? 0 : args[0]); break;
      case "X": clampX(); this.blank(b.y, b.x, Math.min(this.cols, b.x + n(0))); break;
      case "@": this.insertChars(n(0)); break;
      case "P": this.deleteChars(n(0)); break;
      case "L": this.insertLines(n(0)); break;
      case "M": this.deleteLines(n(0)); break;
      case "S": this.scrollUp(n(0)); break;
      case "T": this.scrollDown(n(0)); break;
      case "r":
        b.top = n(0) - 1;
        b.bottom = Math.min(this.rows, n(1, this.rows)) - 1;
        if (b.top >= b.bottom) {
          b.top = 0;
          b.bottom = this.rows - 1;
        }
        b.x = 0;
        b.y = 0;
        break;
      case "m": if (!priv && !raw.startsWith(">")) this.sgr(args); break;
      case "s": b.saved = { x: b.x, y: b.y, attr: this.attr }; break;
      case "u": this.restore(); break;
      default: break; // device reports, modes and the rest: ignored
    }
  }

  mode(mode, on) {
    if (mode === 25) this.cursorVisible = on;
    else if (mode === 47 || mode === 1047 || mode === 1049) {
      if (on && !this.alternate) {
        if (mode === 1049) this.main.saved = { x: this.main.x, y: this.main.y, attr: this.attr };
        this.alt = this.makeBuffer();
        this.buf = this.alt;
      } else if (!on && this.alternate) {
        this.buf = this.main;
        this.alt = null;
        if (mode === 1049) this.restore();
      }
    }
  }

  blank(y, from, to) {
    const row = this.buf.lines[y];
    const a = { ...BLANK, bg: this.attr.bg };
    for (let x = Math.max(0, from); x < Math.min(this.cols, to); x++) row[x] = { ch: " ", a };
  }

  eraseLine(how) {
    const b = this.buf;
    const x = Math.min(b.x, this.cols - 1);
    if (how === 0) this.blank(b.y, x, this.cols);
    else if (how === 1) this.blank(b.y, 0, x + 1);
    else this.blank(b.y, 0, this.cols);
  }

  eraseDisplay(how) {
    const b = this.buf;
    if (how === 0) {
      this.eraseLine(0);
      for (let y = b.y + 1; y < this.rows; y++) this.blank(y, 0, this.cols);
    } else if (how === 1) {
      this.eraseLine(1);
      for (let y = 0; y < b.y; y++) this.blank(y, 0, this.cols);
    } else {
      for (let y = 0; y < this.rows; y++) this.blank(y, 0, this.cols);
      if (how === 3) b.scrollback = [];
    }
  }

  insertChars(n) {
    const b = this.buf;
    const row = b.lines[b.y];
    for (let i = 0; i < n; i++) {
      row.splice(Math.min(b.x, this.cols - 1), 0, { ch: " ", a: BLANK });
      row.length = this.cols;
    }
  }

  deleteChars(n) {
    const b = this.buf;
    const row = b.lines[b.y];
    row.splice(Math.min(b.x, this.cols - 1), n);
    while (row.length < this.cols) row.push({ ch: " ", a: BLANK });
  }

  insertLines(n) {
    const b = this.buf;
    if (b.y < b.top || b.y > b.bottom) return;
    for (let i = 0; i < n; i++) {
      b.lines.splice(b.bottom, 1);
      b.lines.splice(b.y, 0, blankRow(this.cols));
    }
  }

  deleteLines(n) {
    const b = this.buf;
    if (b.y < b.top || b.y > b.bottom) return;
    for (let i = 0; i < n; i++) {
      b.lines.splice(b.y, 1);
      b.lines.splice(b.bottom, 0, blankRow(this.cols));
    }
  }

  sgr(args) {
    let a = { ...this.attr };
    if (!args.length) args = [0];
    for (let i = 0; i < args.length; i++) {
      const p = Number.isNaN(args[i]) ? 0 : args[i];
      if (p === 0) a = { ...BLANK };
      else if (p === 1) a.bold = true;
      else if (p === 2) a.dim = true;
      else if (p === 3) a.italic = true;
      else if (p === 4) a.underline = true;
      else if (p === 7) a.inverse = true;
      else if (p === 22) a.bold = a.dim = false;
      else if (p === 23) a.italic = false;
      else if (p === 24) a.underline = false;
      else if (p === 27) a.inverse = false;
      else if (p >= 30 && p <= 37) a.fg = PALETTE[p - 30];
      else if (p >= 90 && p <= 97) a.fg = PALETTE[p - 90 + 8];
      else if (p === 39) a.fg = null;
      else if (p >= 40 && p <= 47) a.bg = PALETTE[p - 40];
      else if (p >= 100 && p <= 107) a.bg = PALETTE[p - 100 + 8];
      else if (p === 49) a.bg = null;
      else if (p === 38 || p === 48) {
        let colour = null;
        if (args[i + 1] === 5) {
          colour = color256(args[i + 2] & 255);
          i += 2;
        } else if (args[i + 1] === 2) {
          const [r, g, bl] = [args[i + 2], args[i + 3], args[i + 4]].map((v) => (Number.isNaN(v) ? 0 : v & 255));
          colour = `rgb(${r},${g},${bl})`;
          i += 4;
        }
        if (p === 38) a.fg = colour;
        else a.bg = colour;
      }
    }
    this.attr = Object.freeze(a);
  }

  // -- reading -------------------------------------------------------------------

  // The screen's text, one string per row, trailing blanks dropped.
  text() {
    return this.buf.lines.map((row) => row.map((c) => c.ch).join("").replace(/\s+$/, ""));
  }

  // Runs of one attribute per row: [[{text, a}], ...], for the view.
  runs() {
    return this.buf.lines.map((row) => {
      const out = [];
      for (const cell of row) {
        const last = out[out.length - 1];
        if (last && last.a === cell.a) last.text += cell.ch;
        else out.push({ text: cell.ch, a: cell.a });
      }
      return out;
    });
  }
}
