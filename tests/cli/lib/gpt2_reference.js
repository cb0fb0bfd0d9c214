// gpt2_reference.js - the reference for tests/cli/tokenize_gpt2.sh: encode every record of a
// JSONL corpus with gpt-3-encoder's own encode() and compare with a shard that
// `qeffect tokenize --val-fraction 0` wrote (header 20240520/1/count, then per record 50256 and
// the record's tokens, uint16 little-endian).
//
//   node gpt2_reference.js PACKAGE_DIR CORPUS.jsonl SHARD.bin
//
// Lines that are only spaces, tabs, CR or LF are skipped, as qeffect does.  Prints one "ok"
// line and exits 0 when the shard is byte for byte what the package gives; otherwise names the
// first differing record (line number), the token position in it and both token runs there,
// and exits 1.  Exit 2: bad usage or an unreadable file.
'use strict';
const fs = require('fs');
const path = require('path');

if (process.argv.length !== 5) {
  console.error('usage: node gpt2_reference.js PACKAGE_DIR CORPUS.jsonl SHARD.bin');
  process.exit(2);
}
const [pkg, corpus, shardPath] = process.argv.slice(2);
const { encode } = require(path.resolve(pkg));
const EOT = 50256;

const t0 = Date.now();
const raw = fs.readFileSync(corpus);
const records = []; // { line, ids }
let lineno = 0;
let start = 0;
while (start < raw.length) {
  let end = raw.indexOf(0x0a, start);
  if (end < 0) end = raw.length;
  lineno++;
  const line = raw.subarray(start, end).toString('utf8');
  start = end + 1;
  if (/^[ \t\r\n]*$/.test(line)) continue;
  const ids = encode(JSON.parse(line).text);
  for (let i = 0; i < ids.length; i++) {
    if (!Number.isInteger(ids[i])) {
      console.log(`FAIL: the package itself gives a non-id (${ids[i]}) at line ${lineno} token ${i}`);
      process.exit(1);
    }
  }
  records.push({ line: lineno, ids });
}
const ms = Date.now() - t0;
let total = 0;
for (const r of records) total += 1 + r.ids.length;
const expect = Buffer.alloc(1024 + 2 * total);
expect.writeInt32LE(20240520, 0);
expect.writeInt32LE(1, 4);
expect.writeInt32LE(total, 8);
let at = 1024;
for (const r of records) {
  expect.writeUInt16LE(EOT, at); at += 2;
  for (const id of r.ids) { expect.writeUInt16LE(id, at); at += 2; }
}

const got = fs.readFileSync(shardPath);
if (got.equals(expect)) {
  console.log(`ok: ${records.length} records, ${total} tokens identical to gpt-3-encoder encode() (node took ${ms} ms)`);
  process.exit(0);
}
if (got.length < 1024) {
  console.log(`FAIL: ${shardPath} is ${got.length} bytes, shorter than its header`);
  process.exit(1);
}
const hdr = [got.readInt32LE(0), got.readInt32LE(4), got.readInt32LE(8)];
if (hdr[0] !== 20240520 || hdr[1] !== 1 || hdr[2] !== total || got.compare(expect, 12, 1024, 12, 1024) !== 0)
  console.log(`FAIL: header ${hdr.join(',')} (rest zero: ${got.compare(expect, 12, 1024, 12, 1024) === 0}), want 20240520,1,${total}`);
// Walk the records in step to name the first that differs.
at = 1024;
for (const r of records) {
  const want = [EOT, ...r.ids];
  for (let i = 0; i < want.length; i++) {
    const g = at + 2 * i + 1 < got.length ? got.readUInt16LE(at + 2 * i) : -1;
    if (g !== want[i]) {
      const show = (f) => Array.from({ length: 8 }, (_, k) => f(i + k)).filter((x) => x !== undefined).join(' ');
      const gv = (k) => (at + 2 * k + 1 < got.length ? got.readUInt16LE(at + 2 * k) : undefined);
      console.log(`FAIL: record at line ${r.line}, token ${i} (0 = its EOT): got ${show(gv)}, want ${show((k) => want[k])}`);
      process.exit(1);
    }
  }
  at += 2 * want.length;
}
console.log(`FAIL: every record matches but the shard has ${(got.length - at) / 2} tokens more`);
process.exit(1);
