import { describe, expect, it } from "vitest";
import { classifyAddress, refuseAddress } from "../../src/tools/builtin/address-policy.js";
import { canonicalHost, matchHost, parseHostPattern } from "../../src/tools/builtin/host-list.js";
import { formatIp, parseCidr, parseIp, parseIPv4 } from "../../src/tools/builtin/ip-address.js";
import { configError } from "../fixtures/config-error.js";

const v4 = (s: string) => {
  const ip = parseIPv4(s);
  return ip ? formatIp(ip) : undefined;
};

describe("SSRF address parsing and policy", () => {
  it("ip - reads every IPv4 form that the URL parser and inet_aton accept, and agrees with new URL()", () => {
    const forms: Record<string, string> = {
      "2130706433": "127.0.0.1",
      "0177.0.0.1": "127.0.0.1",
      "0x7f.1": "127.0.0.1",
      "127.1": "127.0.0.1",
      "127.0.1": "127.0.0.1",
      "0x7f000001": "127.0.0.1",
      "017700000001": "127.0.0.1",
      "127.0.0.1.": "127.0.0.1",
      "0": "0.0.0.0",
      "0x": "0.0.0.0",
      "169.254.43518": "169.254.169.254",
      "0xa9.0xfe.0xa9.0xfe": "169.254.169.254",
      "4294967295": "255.255.255.255",
    };
    for (const [form, expected] of Object.entries(forms)) {
      expect(v4(form), form).toBe(expected);
      expect(new URL(`http://${form}/`).hostname, form).toBe(expected);
    }
    for (const name of ["example.com", "1.2.3.4.5", "4294967296", "256.1.1.1", "08.1.1.1", "1.2.3.x", "", "0x1g"]) {
      expect(v4(name), name).toBeUndefined();
    }
  });

  it("ip - IPv6 literals expand with embedded IPv4 tails, brackets and zone ids, and print in RFC 5952 form", () => {
    expect(formatIp(parseIp("[0:0:0:0:0:ffff:127.0.0.1]")!)).toBe("::ffff:7f00:1");
    expect(formatIp(parseIp("fe80::1%eth0")!)).toBe("fe80::1");
    expect(formatIp(parseIp("2001:db8:0:0:1:0:0:1")!)).toBe("2001:db8::1:0:0:1");
    expect(formatIp(parseIp("::")!)).toBe("::");
    expect(parseIp("::ffff:999.0.0.1")).toBeUndefined();
  });

  it("ip - classifies by the IPv4 address inside mapped, compatible, NAT64, 6to4 and Teredo IPv6 forms", () => {
    const cls = (s: string) => classifyAddress(parseIp(s)!).class;
    expect(cls("8.8.8.8")).toBe("public");
    expect(cls("::ffff:8.8.8.8")).toBe("public");
    expect(cls("64:ff9b::8.8.8.8")).toBe("public");
    expect(cls("2606:4700::1111")).toBe("public");
    expect(cls("::ffff:10.1.2.3")).toBe("private");
    expect(cls("64:ff9b::192.168.1.1")).toBe("private");
    expect(cls("2002:a9fe:a9fe::1")).toBe("forbidden");
    expect(cls("2001:0:4136:e378:8000:63bf:f7f7:f7f7")).toBe("public"); // Teredo client 8.8.8.8 (stored inverted)
    expect(cls("2001:0:4136:e378:8000:63bf:3fff:fdd2")).toBe("reserved"); // Teredo client 192.0.2.45
    expect(cls("2001:0:0a00:0001::1")).toBe("private"); // Teredo server 10.0.0.1
    expect(cls("::ffff:0.0.0.0")).toBe("forbidden");
    expect(cls("3fff::1")).toBe("public");
    expect(cls("4000::1")).toBe("reserved");
    expect(cls("100::1")).toBe("reserved");
  });

  it("ip - allow_private lifts private but not metadata or unspecified; allow_cidrs lifts only its blocks, mapped forms included", () => {
    const open = { allowPrivate: true };
    expect(refuseAddress("10.0.0.1", open)).toBeUndefined();
    expect(refuseAddress("::1", open)).toBeUndefined();
    expect(refuseAddress("169.254.169.254", open)?.rule).toBe("always refused");
    expect(refuseAddress("0.0.0.0", open)?.rule).toBe("always refused");
    const cidrs = { allowCidrs: [parseCidr("10.20.0.0/16")!, parseCidr("fd00:1::/32")!, parseCidr("198.18.0.1")!] };
    expect(refuseAddress("10.20.3.4", cidrs)).toBeUndefined();
    expect(refuseAddress("::ffff:10.20.3.4", cidrs)).toBeUndefined();
    expect(refuseAddress("fd00:1:2::3", cidrs)).toBeUndefined();
    expect(refuseAddress("198.18.0.1", cidrs)).toBeUndefined();
    expect(refuseAddress("198.18.0.2", cidrs)?.kind).toBe("a benchmarking address");
    expect(refuseAddress("10.21.0.1", cidrs)?.kind).toBe("a private address (10/8)");
    expect(parseCidr("10.0.0.0/33")).toBeUndefined();
    expect(parseCidr("0x7f.1/8")).toBeUndefined();
  });

  it("host list - exact and *.suffix entries match canonical hosts; malformed entries are ConfigErrors naming the key", () => {
    const list = [parseHostPattern("*.Example.com", "k[0]"), parseHostPattern("bücher.de", "k[1]"), parseHostPattern("[::1]", "k[2]")];
    expect(matchHost(list, "api.example.com.")?.written).toBe("*.Example.com");
    expect(matchHost(list, "example.com")).toBeUndefined();
    expect(matchHost(list, "xn--bcher-kva.de")?.written).toBe("bücher.de");
    expect(matchHost(list, "[0:0::1]")?.written).toBe("[::1]");
    expect(canonicalHost("0x7f.1")).toBe("127.0.0.1");
    expect(configError(() => parseHostPattern("a b.com", "tools.http.allow_hosts[3]")).key).toBe("tools.http.allow_hosts[3]");
    expect(configError(() => parseHostPattern("*.*.com", "x")).message).toContain('"*.example.com"');
  });
});
