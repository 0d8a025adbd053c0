"""Choosing an emulated instruction for entry probes (real prologues from torch 2.13) and for
entry and return pairs."""

import pytest

from rlscope_top.probes.prologue import cheap_offset, pair_offset


def test_pywarninghandler_ctor_skips_rip_relative_lea():
    # lea 0xd49e19(%rip),%rax ; push %rbx
    assert cheap_offset(bytes.fromhex("488d0519 9ed400 53 4889fb".replace(" ", ""))) == 7


def test_record_function_exit_skips_to_jmp():
    # mov (%rdi),%rdi ; add $0x10,%rdi ; jmp rel32
    assert cheap_offset(bytes.fromhex("488b3f 4883c710 e954ba34fb".replace(" ", ""))) == 7


def test_push_first_stays_at_zero():
    assert cheap_offset(bytes.fromhex("4157 4989ff 4156".replace(" ", ""))) == 0
    assert cheap_offset(bytes.fromhex("55 4889e5".replace(" ", ""))) == 0


def test_endbr64_then_push():
    assert cheap_offset(bytes.fromhex("f30f1efa 55 4889e5".replace(" ", ""))) == 4


def test_unknown_instruction_falls_back_to_zero():
    assert cheap_offset(bytes.fromhex("c5f877 55".replace(" ", ""))) == 0   # vzeroupper


# -- entry and return pairs: only past instructions that leave rsp alone --------------

def test_pair_skips_endbr64_to_push():
    # a CET build (Ubuntu's gcc default): endbr64 ; push %rbx ; sub $0x30,%rsp
    assert pair_offset(bytes.fromhex("f30f1efa 53 4883ec30".replace(" ", ""))) == 4


def test_pair_skips_what_leaves_rsp_alone():
    assert pair_offset(bytes.fromhex("488d05199ed400 53".replace(" ", ""))) == 7     # lea rip ; push
    assert pair_offset(bytes.fromhex("4889e5 55".replace(" ", ""))) == 3             # mov %rsp,%rbp reads it
    assert pair_offset(bytes.fromhex("4989fc 55".replace(" ", ""))) == 3             # mov %rdi,%r12 (REX.B)
    assert pair_offset(bytes.fromhex("31c0 55".replace(" ", ""))) == 2               # xor %eax,%eax


@pytest.mark.parametrize("prologue", [
    "4883ec28 53",        # sub $0x28,%rsp
    "4881ec00010000 53",  # sub $0x100,%rsp
    "4889fc 55",          # mov %rdi,%rsp
    "488b27 55",          # mov (%rdi),%rsp
    "488d6708 55",        # lea 0x8(%rdi),%rsp
    "31e4 55",            # xor %esp,%esp
    "89fc 55",            # mov %edi,%esp
])
def test_pair_never_moves_past_a_write_to_rsp(prologue):
    """There the return address is no longer at [rsp]; an entry probe may still move (cheap_offset)."""
    code = bytes.fromhex(prologue.replace(" ", ""))
    assert pair_offset(code) == 0 and cheap_offset(code) > 0


def test_pair_stays_where_the_decoder_stops():
    assert pair_offset(bytes.fromhex("4889f9 48c74424f800000000".replace(" ", ""))) == 0   # sim_work at -O1
    assert pair_offset(bytes.fromhex("55 4889e5".replace(" ", ""))) == 0
