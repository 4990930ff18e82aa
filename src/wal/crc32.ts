import CRC32 from "crc-32";

/**
 * CRC-32/IEEE (polynomial 0x04C11DB7 reflected, init and xorout 0xFFFFFFFF), the
 * zlib/PNG/Ethernet CRC, as computed by the `crc-32` package. That package returns a
 * signed 32-bit integer; the record format stores the unsigned value, so normalise
 * here and nowhere else.
 */
export function crc32(data: Uint8Array): number {
  return CRC32.buf(data) >>> 0;
}
