// A line diff for the changes pane: the longest common subsequence of the
// two texts' lines, as [op, line] pairs (" " kept, "-" removed, "+" added).
// Past a size where the table would be large, the whole before side is
// shown removed and the after side added.

const LIMIT = 4_000_000;

export function lineDiff(before, after) {
  const a = before === "" ? [] : before.replace(/\n$/, "").split("\n");
  const b = after === "" ? [] : after.replace(/\n$/, "").split("\n");
  let start = 0;
  while (start < a.length && start < b.length && a[start] === b[start]) start++;
  let endA = a.length, endB = b.length;
  while (endA > start && endB > start && a[endA - 1] === b[endB - 1]) {
    endA--;
    endB--;
  }
  const head = a.slice(0, start).map((l) => [" ", l]);
  const tail = a.slice(endA).map((l) => [" ", l]);
  const x = a.slice(start, endA), y = b.slice(start, endB);
  const n = x.length, m = y.length;
  if (n * m > LIMIT) return [...head, ...x.map((l) => ["-", l]), ...y.map((l) => ["+", l]), ...tail];
  const table = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      table[i][j] = x[i] === y[j] ? table[i + 1][j + 1] + 1 : Math.max(table[i + 1][j], table[i][j + 1]);
    }
  }
  const middle = [];
  let i = 0, j = 0;
  while (i < n && j < m) {
    if (x[i] === y[j]) {
      middle.push([" ", x[i]]);
      i++;
      j++;
    } else if (table[i + 1][j] >= table[i][j + 1]) middle.push(["-", x[i++]]);
    else middle.push(["+", y[j++]]);
  }
  while (i < n) middle.push(["-", x[i++]]);
  while (j < m) middle.push(["+", y[j++]]);
  return [...head, ...middle, ...tail];
}
