/**
 * A structural pass over msgpack bytes, run before msgpackr decodes them. msgpackr
 * recurses without a depth limit and trusts length prefixes; this pass is iterative,
 * so hostile input (a million nested arrays, an array that claims 2^32 elements in ten
 * bytes, trailing garbage) is rejected cheaply instead of exhausting the stack or memory.
 *
 * Extensions: msgpackr decodes many of its own (records 0x72, Set 0x73, Error 0x65,
 * RegExp 0x78, structured-clone ids/pointers 0x69/0x70, typed arrays 0x74, bundled
 * strings 0x62, BigInt 0x42, undefined 0x00), and several of them read the value that
 * *follows* the extension, outside its declared length, so a chain of them nests as
 * deep as the bytes allow (20,000 `Set`s in 60 KB overflowed the stack). The wire
 * format needs none of them: Kova's encoder writes plain msgpack plus the standard
 * timestamp (type -1), which any language decodes. So the timestamp (4, 8 or 12 bytes)
 * is the only extension accepted; every other type is refused here, before msgpackr
 * sees it (docs/protocol.md, "Decoding limits").
 *
 * Map keys must be strings or numbers/nil/booleans (what msgpackr turns into property
 * names); the key `__proto__` is refused outright, so no decoded object ever carries it.
 * Every value takes at least one byte, so the values still owed by all open containers
 * may never exceed the bytes left: a header claiming more is refused at once.
 *
 * @returns undefined when the bytes hold exactly one well-formed value within
 *   `maxDepth`, else a description of the first problem.
 */
export function scanMsgpack(buf: Uint8Array, maxDepth: number): string | undefined {
  const len = buf.length;
  if (len === 0) return "empty message";
  let pos = 0;
  // Per open container: values still expected in it, and whether it is a map.
  const remaining: number[] = [];
  const isMap: boolean[] = [];
  let expect = 1; // values expected at the current level (top level: exactly one)
  let inMap = false;
  let owed = 1; // values still expected across every open level
  const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);

  const open = (count: number, map: boolean): string | undefined => {
    if (count === 0) return undefined;
    owed += count;
    if (owed > len - pos) {
      return `container at byte ${pos} claims ${count} values but only ${len - pos} bytes remain for ${owed} expected values`;
    }
    if (remaining.length + 1 > maxDepth) return `nesting deeper than ${maxDepth}`;
    remaining.push(expect);
    isMap.push(inMap);
    expect = count;
    inMap = map;
    return undefined;
  };
  const skip = (n: number): string | undefined => {
    if (pos + n > len) return `truncated at byte ${pos}`;
    pos += n;
    return undefined;
  };
  const need = (n: number): string | undefined => (pos + n > len ? `truncated at byte ${pos}` : undefined);
  /** Moves past an n-byte length field and returns where it starts. */
  const take = (n: number): number => {
    pos += n;
    return pos - n;
  };
  /** An extension starting at byte `at` whose data is `size` bytes after its type byte (at `pos`). */
  const ext = (size: number, at: number): string | undefined => {
    const t = need(1 + size);
    if (t) return t;
    const type = buf[pos]!;
    if (type !== 0xff) {
      return `extension type ${type > 127 ? type - 256 : type} at byte ${at} is not accepted (the wire format allows only the msgpack timestamp, type -1)`;
    }
    if (size !== 4 && size !== 8 && size !== 12) return `timestamp extension at byte ${at} has ${size} bytes (4, 8 or 12 expected)`;
    pos += 1 + size;
    return undefined;
  };

  while (true) {
    if (expect === 0) {
      const up = remaining.pop();
      if (up === undefined) break;
      expect = up;
      inMap = isMap.pop()!;
      continue;
    }
    if (pos >= len) return `truncated at byte ${pos}`;
    // In a map, values alternate key, value: a key when an even number is left.
    const isKey = inMap && (expect & 1) === 0;
    expect--;
    owed--;
    const start = pos;
    const b = buf[pos++]!;
    let err: string | undefined;
    if (isKey) {
      err = checkKey(buf, view, start);
      if (err) return err;
    }
    if (b <= 0x7f || b >= 0xe0 || b === 0xc0 || b === 0xc2 || b === 0xc3) continue;
    if (b >= 0x80 && b <= 0x8f) err = open((b & 0x0f) * 2, true);
    else if (b >= 0x90 && b <= 0x9f) err = open(b & 0x0f, false);
    else if (b >= 0xa0 && b <= 0xbf) err = skip(b & 0x1f);
    else {
      switch (b) {
        case 0xc1:
          return `invalid byte 0xc1 at ${pos - 1}`;
        case 0xc4:
        case 0xd9:
          err = need(1) ?? skip(1 + buf[pos]!);
          break;
        case 0xc5:
        case 0xda:
          err = need(2) ?? skip(2 + view.getUint16(pos));
          break;
        case 0xc6:
        case 0xdb:
          err = need(4) ?? skip(4 + view.getUint32(pos));
          break;
        case 0xc7:
          err = need(1) ?? ext(buf[take(1)]!, start);
          break;
        case 0xc8:
          err = need(2) ?? ext(view.getUint16(take(2)), start);
          break;
        case 0xc9:
          err = need(4) ?? ext(view.getUint32(take(4)), start);
          break;
        case 0xca:
        case 0xce:
        case 0xd2:
          err = skip(4);
          break;
        case 0xcb:
        case 0xcf:
        case 0xd3:
          err = skip(8);
          break;
        case 0xcc:
        case 0xd0:
          err = skip(1);
          break;
        case 0xcd:
        case 0xd1:
          err = skip(2);
          break;
        case 0xd4:
          err = ext(1, start);
          break;
        case 0xd5:
          err = ext(2, start);
          break;
        case 0xd6:
          err = ext(4, start);
          break;
        case 0xd7:
          err = ext(8, start);
          break;
        case 0xd8:
          err = ext(16, start);
          break;
        case 0xdc:
          err = need(2) ?? open(view.getUint16(take(2)), false);
          break;
        case 0xdd:
          err = need(4) ?? open(view.getUint32(take(4)), false);
          break;
        case 0xde:
          err = need(2) ?? open(view.getUint16(take(2)) * 2, true);
          break;
        case 0xdf:
          err = need(4) ?? open(view.getUint32(take(4)) * 2, true);
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

// "__proto__" in UTF-8.
const PROTO = [0x5f, 0x5f, 0x70, 0x72, 0x6f, 0x74, 0x6f, 0x5f, 0x5f];

/**
 * A map key must become a property name: msgpackr stringifies strings, numbers, nil and
 * booleans, and throws on anything else. `__proto__` is refused in any string form.
 */
function checkKey(buf: Uint8Array, view: DataView, at: number): string | undefined {
  const b = buf[at]!;
  let strLen = -1;
  let strStart = 0;
  if (b >= 0xa0 && b <= 0xbf) {
    strLen = b & 0x1f;
    strStart = at + 1;
  } else if (b === 0xd9 && at + 1 < buf.length) {
    strLen = buf[at + 1]!;
    strStart = at + 2;
  } else if (b === 0xda && at + 2 < buf.length) {
    strLen = view.getUint16(at + 1);
    strStart = at + 3;
  } else if (b === 0xdb && at + 4 < buf.length) {
    strLen = view.getUint32(at + 1);
    strStart = at + 5;
  } else if (b === 0xd9 || b === 0xda || b === 0xdb) {
    return undefined; // truncated: the caller reports it
  }
  if (strLen >= 0) {
    if (strLen === PROTO.length && strStart + strLen <= buf.length && PROTO.every((c, i) => buf[strStart + i] === c)) {
      return `map key "__proto__" at byte ${at} is not accepted`;
    }
    return undefined;
  }
  const scalar = b <= 0x7f || b >= 0xe0 || b === 0xc0 || b === 0xc2 || b === 0xc3 || (b >= 0xca && b <= 0xd3);
  return scalar ? undefined : `map key at byte ${at} must be a string or a number (found byte 0x${b.toString(16)})`;
}
