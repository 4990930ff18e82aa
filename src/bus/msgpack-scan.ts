/**
 * A structural pass over msgpack bytes, run before msgpackr decodes them. msgpackr
 * recurses without a depth limit and trusts length prefixes; this pass is iterative,
 * so hostile input (a million nested arrays, an array that claims 2^32 elements in ten
 * bytes, trailing garbage) is rejected cheaply instead of exhausting the stack or memory.
 *
 * @returns undefined when the bytes hold exactly one well-formed value within
 *   `maxDepth`, else a description of the first problem.
 */
export function scanMsgpack(buf: Uint8Array, maxDepth: number): string | undefined {
  const len = buf.length;
  if (len === 0) return "empty message";
  let pos = 0;
  // remaining[i] = values still expected inside the i-th open container.
  const remaining: number[] = [];
  let expect = 1; // values expected at the current level (top level: exactly one)
  const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);

  const open = (count: number): string | undefined => {
    if (count > len - pos) return `container claims ${count} values but only ${len - pos} bytes remain`;
    if (count === 0) return undefined;
    if (remaining.length + 1 > maxDepth) return `nesting deeper than ${maxDepth}`;
    remaining.push(expect);
    expect = count;
    return undefined;
  };
  const skip = (n: number): string | undefined => {
    if (pos + n > len) return `truncated at byte ${pos}`;
    pos += n;
    return undefined;
  };
  const need = (n: number): string | undefined => (pos + n > len ? `truncated at byte ${pos}` : undefined);

  while (true) {
    if (expect === 0) {
      const up = remaining.pop();
      if (up === undefined) break;
      expect = up;
      continue;
    }
    if (pos >= len) return `truncated at byte ${pos}`;
    expect--;
    const b = buf[pos++]!;
    let err: string | undefined;
    if (b <= 0x7f || b >= 0xe0 || b === 0xc0 || b === 0xc2 || b === 0xc3) continue;
    if (b >= 0x80 && b <= 0x8f) err = open((b & 0x0f) * 2);
    else if (b >= 0x90 && b <= 0x9f) err = open(b & 0x0f);
    else if (b >= 0xa0 && b <= 0xbf) err = skip(b & 0x1f);
    else {
      switch (b) {
        case 0xc1:
          return `invalid byte 0xc1 at ${pos - 1}`;
        case 0xc4: case 0xd9:
          err = need(1) ?? skip(1 + buf[pos]!);
          break;
        case 0xc5: case 0xda:
          err = need(2) ?? skip(2 + view.getUint16(pos));
          break;
        case 0xc6: case 0xdb:
          err = need(4) ?? skip(4 + view.getUint32(pos));
          break;
        case 0xc7:
          err = need(1) ?? skip(2 + buf[pos]!);
          break;
        case 0xc8:
          err = need(2) ?? skip(3 + view.getUint16(pos));
          break;
        case 0xc9:
          err = need(4) ?? skip(5 + view.getUint32(pos));
          break;
        case 0xca: case 0xce: case 0xd2:
          err = skip(4);
          break;
        case 0xcb: case 0xcf: case 0xd3:
          err = skip(8);
          break;
        case 0xcc: case 0xd0:
          err = skip(1);
          break;
        case 0xcd: case 0xd1:
          err = skip(2);
          break;
        case 0xd4: err = skip(2); break;
        case 0xd5: err = skip(3); break;
        case 0xd6: err = skip(5); break;
        case 0xd7: err = skip(9); break;
        case 0xd8: err = skip(17); break;
        case 0xdc:
          err = need(2) ?? ((pos += 2), open(view.getUint16(pos - 2)));
          break;
        case 0xdd:
          err = need(4) ?? ((pos += 4), open(view.getUint32(pos - 4)));
          break;
        case 0xde:
          err = need(2) ?? ((pos += 2), open(view.getUint16(pos - 2) * 2));
          break;
        case 0xdf:
          err = need(4) ?? ((pos += 4), open(view.getUint32(pos - 4) * 2));
          break;
        default:
          return `invalid byte 0x${b.toString(16)} at ${pos - 1}`;
      }
    }
    if (err) return err;
  }
  if (pos !== len) return `${len - pos} trailing bytes after the value`;
  return undefined;
}
