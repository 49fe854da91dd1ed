"""Boilerplate: paragraphs that many of a tenant's pages repeat are found and left out; the rest stays."""

from __future__ import annotations

from policies.retrieval.boilerplate import (
    BoilerplateRule,
    count_documents,
    document_keys,
    keyed_paragraphs,
    paragraph_key,
    paragraphs,
    repeated_keys,
    without_boilerplate,
)

HEADER = "Acme Help Center. Home > Support."
FOOTER = "Was this article helpful?  Contact us\nat help@acme.example."


def page(body: str, footer: str = FOOTER) -> str:
    return f"{HEADER}\n\n{body}\n\n{footer}\n"


def boilerplate_of(texts: list[str]) -> frozenset[str]:
    return repeated_keys(count_documents(document_keys(text) for text in texts), len(texts), BoilerplateRule())


def test_the_header_and_footer_every_page_shares_are_left_out_and_the_body_is_kept() -> None:
    texts = [page(f"Article {n} says something only it says.") for n in range(10)]
    repeated = boilerplate_of(texts)
    assert without_boilerplate(texts[3], repeated) == "Article 3 says something only it says."


def test_a_footer_wrapped_or_cased_differently_on_one_page_still_counts() -> None:
    texts = [page(f"Body {n}.") for n in range(9)] + [page("Body 9.", "was this ARTICLE helpful? contact us at\n"
                                                                       "help@acme.example.")]
    repeated = boilerplate_of(texts)
    assert without_boilerplate(texts[9], repeated) == "Body 9."


def test_text_shared_by_a_few_pages_of_many_is_content_not_boilerplate() -> None:
    shared = "Only the Business plan has audit logs."
    texts = [page(f"Body {n}.\n\n{shared}" if n < 3 else f"Body {n}.") for n in range(20)]
    repeated = boilerplate_of(texts)  # 3 of 20 pages: under min_share
    assert paragraph_key(shared) not in repeated
    assert shared in without_boilerplate(texts[0], repeated)


def test_a_collection_smaller_than_min_documents_has_no_boilerplate() -> None:
    texts = [page("One."), page("Two.")]
    assert boilerplate_of(texts) == frozenset()
    assert without_boilerplate(texts[0], boilerplate_of(texts)) == texts[0]


def test_a_page_that_repeats_a_paragraph_counts_once() -> None:
    texts = [page("Tip.\n\nTip.\n\nTip.")] + [page(f"Body {n}.") for n in range(9)]
    assert count_documents(document_keys(text) for text in texts)[paragraph_key("Tip.")] == 1


def test_a_page_without_boilerplate_comes_back_unchanged_offsets_and_all() -> None:
    text = "First paragraph.\n\n\n  Second, indented.\n"
    assert without_boilerplate(text, frozenset({paragraph_key("Something else.")})) == text
    assert paragraphs(text) == ["First paragraph.", "Second, indented."]


def test_keyed_paragraphs_keeps_the_first_of_repeats_in_order() -> None:
    keyed = keyed_paragraphs("Footer.\n\nBody.\n\nfooter.\n")
    assert list(keyed.values()) == ["Footer.", "Body."]
    assert list(keyed) == [paragraph_key("FOOTER."), paragraph_key("Body.")]
