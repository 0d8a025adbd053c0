"""Choosing an emulated instruction for entry probes (real prologues from torch 2.13)."""

from rlscope_top.probes.prologue import cheap_offset


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
