"""Pick a cheap instruction to put an entry uprobe on.

The x86 uprobe handler emulates push, nop and direct jmp/call (about 0.5-0.7 us a
hit) and single-steps everything else out of line (about 9 us). An entry-only probe
may sit on any instruction of the straight-line prologue, so we walk forward over
the few instruction forms compilers put first and stop at one that is emulated.
A return probe takes the return address from [rsp] where it fires, so an entry and
return pair may move only past instructions that leave rsp alone (``pair_offset``):
a function built with CET (Ubuntu's and Fedora's gcc default) starts with `endbr64`,
stepped out of line, then `push`.
"""

from __future__ import annotations

MAX_SKIP = 24


def is_cheap_at(code: bytes, i: int) -> bool:
    b = code[i]
    if 0x50 <= b <= 0x57 or b == 0x90:          # push r64, nop
        return True
    if b == 0x41 and i + 1 < len(code) and 0x50 <= code[i + 1] <= 0x57:  # push r8-r15
        return True
    if b in (0xE8, 0xE9, 0xEB):                  # call/jmp rel
        return True
    if b == 0x0F and i + 1 < len(code) and code[i + 1] == 0x1F:  # nopl
        return True
    if b == 0x66 and code[i + 1:i + 3] == b"\x0f\x1f":  # nopw
        return True
    return False


def _length(code: bytes, i: int) -> int | None:
    """Length of a skippable straight-line instruction at i, or None."""
    if code[i:i + 4] == b"\xf3\x0f\x1e\xfa":     # endbr64
        return 4
    b = code[i]
    if b in (0x48, 0x49, 0x4C, 0x4D) and i + 2 < len(code):
        op, modrm = code[i + 1], code[i + 2]
        mod, rm = modrm >> 6, modrm & 7
        if op in (0x89, 0x8B, 0x8D, 0x31, 0x29, 0x01):
            if mod == 0 and rm == 5:
                return 7                          # rip-relative disp32
            if mod == 3:
                return 3                          # reg, reg
            if mod == 0 and rm != 4:
                return 3                          # [reg]
            if mod == 1 and rm != 4:
                return 4                          # [reg + disp8]
        if op == 0x83 and mod == 3:
            return 4                              # add/sub reg, imm8
        if op == 0x81 and mod == 3:
            return 7                              # add/sub reg, imm32
    if b in (0x89, 0x8B, 0x31, 0x29) and i + 1 < len(code) and code[i + 1] >> 6 == 3:
        return 2                                  # 32-bit reg, reg
    if b == 0x66 and code[i + 1:i + 3] == b"\x0f\xef" and i + 3 < len(code) and code[i + 3] >> 6 == 3:
        return 4                                  # pxor xmm, xmm
    return None


def cheap_offset(code: bytes) -> int:
    """Offset of the first emulated instruction in a prologue.

    Args:
        code: the first bytes of the function.

    Returns:
        An offset into ``code``; 0 when the first instruction is already cheap or
        the prologue holds an instruction this decoder does not know.
    """
    i = 0
    while i < min(len(code), MAX_SKIP):
        if is_cheap_at(code, i):
            return i
        n = _length(code, i)
        if n is None:
            return 0
        i += n
    return 0


def _writes_rsp(code: bytes, i: int) -> bool:
    """Whether the skippable instruction at i (one ``_length`` knows) may write rsp."""
    if code[i:i + 4] == b"\xf3\x0f\x1e\xfa" or code[i] == 0x66:
        return False                                  # endbr64, pxor
    rex = code[i] if code[i] in (0x48, 0x49, 0x4C, 0x4D) else 0
    j = i + 1 if rex else i
    op, modrm = code[j], code[j + 1]
    mod, reg, rm = modrm >> 6, (modrm >> 3) & 7, modrm & 7
    if op in (0x8B, 0x8D):                            # mov and lea write their reg field
        return reg == 4 and not rex & 4
    return mod == 3 and rm == 4 and not rex & 1       # the rest write their r/m (a register with mod 3)


def pair_offset(code: bytes) -> int:
    """Offset of the first emulated instruction an entry and return pair may sit on: the
    instructions before it leave rsp alone, so [rsp] there is still the return address.

    Args:
        code: the first bytes of the function.

    Returns:
        An offset into ``code``; 0 when the first instruction is already cheap, or none is
        reached before one that writes rsp or that this decoder does not know.
    """
    i = 0
    while i < min(len(code), MAX_SKIP):
        if is_cheap_at(code, i):
            return i
        n = _length(code, i)
        if n is None or _writes_rsp(code, i):
            return 0
        i += n
    return 0
