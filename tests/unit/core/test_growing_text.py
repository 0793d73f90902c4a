from proxy.core.growing_text import GrowingText


def test_pieces_are_kept_apart_until_read_then_joined_once():
    grown = GrowingText("ab")
    for piece in ["c", "", "de", "f"] * 1000:
        grown.add(piece)
    assert len(grown.pieces) == 1 + 3000  # nothing joined while it grows (the empty pieces not even kept)
    assert grown.text() == "ab" + "cdef" * 1000
    assert grown.pieces == ["ab" + "cdef" * 1000]  # joined once: a second read joins nothing
    assert str(grown) == grown.text() and grown.pieces == ["ab" + "cdef" * 1000]
    grown.add("g")
    assert grown.text().endswith("fg")
    assert not GrowingText() and GrowingText().text() == "" and GrowingText("x")
