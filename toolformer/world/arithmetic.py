"""Arithmetic in prose: forms for the four operations, their words and numbers.

A :class:`Form` states one operation three ways: as a story sentence that
gives the answer (``... 3563 sacks in all.``), and as a word problem (a body
and a question, SVAMP-style) whose answer follows as ``The answer is 3563.``.
There are 12 forms per operation. Some state the numbers in the reverse of
the call's order (``Take 17 jars away from 240 jars``), some ask the question
first (``How many ... if ...?``), and any form may write its numbers with
thousands separators (``6,305``).

Each form is tagged with its cue words (``in all``, ``difference``, ``per``,
``equally`` ...). :func:`split_forms` holds a third of the forms of each
operation out by seed, and part of the vocabulary (objects, first names):
held-out forms appear in no training text, only in the ``math_unseen``
evaluation set, but every cue tag of a held-out form also tags a training
form of the same operation, and every operation keeps training forms with the
numbers in either order. Held out is meant as a new composition of known
words, not a new meaning (docs/design.md, "The small world"). The tags are
coarser than the words: ``sub-how-many-more`` and ``sub-fewer`` share
``more_than``, though "more" means + in every training form that says it.

Two-step problems (chained calls) are in :mod:`toolformer.world.twostep`.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

OPS = ("+", "-", "*", "/")
APPLY = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a // b}
OP_NAMES = {"+": "Addition", "-": "Subtraction", "*": "Multiplication", "/": "Common-Division"}

UNITS = [("sacks", "sack"), ("eggs", "egg"), ("apples", "apple"), ("jars", "jar"), ("bricks", "brick"),
         ("fish", "fish"), ("loaves", "loaf"), ("barrels", "barrel"), ("books", "book"), ("candles", "candle"),
         ("baskets", "basket"), ("lamps", "lamp"), ("coats", "coat"), ("planks", "plank"), ("stamps", "stamp"),
         ("nails", "nail"), ("buttons", "button"), ("cups", "cup"), ("bottles", "bottle"), ("ropes", "rope"),
         ("hats", "hat"), ("shoes", "shoe"), ("pears", "pear"), ("plums", "plum"), ("bowls", "bowl"),
         ("spoons", "spoon"), ("tiles", "tile"), ("boards", "board"), ("kettles", "kettle"), ("combs", "comb"),
         ("sheep", "sheep"), ("geese", "goose"), ("pens", "pen"), ("maps", "map"), ("bells", "bell"),
         ("nets", "net")]
FIRST_NAMES = ["Tom", "Alice", "Ben", "Clara", "Sam", "Lucy", "Jack", "Emma", "Paul", "Rosa", "Hugo", "Ida",
               "Max", "Nora", "Leo", "Greta", "Otto", "Maya", "Felix", "Lena", "Oscar", "Hans", "Karl", "Eva"]
ACTORS = ["The mill in {T}", "The market of {T}", "The baker of {T}", "The farm at {T}", "The school in {T}",
          "{P}", "{P}"]


@dataclass(frozen=True)
class Form:
    op: str
    key: str
    story: str
    """A sentence stating the answer ``{c}`` with the operands ``{a}`` and ``{b}``."""
    body: str
    """The situation without the answer (a word problem's body; empty when the question comes first)."""
    question: str
    """The question of the word problem."""
    cues: tuple[str, ...]
    """The words that name the operation; a held-out form's cues all occur in training forms."""
    reversed: bool = False
    """The problem states ``{b}`` before ``{a}`` (the call is still ``a op b``)."""


def _f(op, key, story, body, question, cues, reversed=False) -> Form:
    return Form(op, key, story, body, question, tuple(cues.split()), reversed)


FORMS = [
    # -- addition ----------------------------------------------------------------------------
    _f("+", "add-seasons", "{Actor} sold {a} {units} in spring and {b} in autumn, {c} {units} in all.",
       "{Actor} sold {a} {units} in spring and {b} {units} in autumn.", "How many {units} were sold in all?",
       "in_all"),
    _f("+", "add-days", "{Actor} counted {a} {units} on Monday and {b} on Tuesday, {c} {units} in total.",
       "{Actor} counted {a} {units} on Monday and {b} {units} on Tuesday.", "How many {units} were counted in total?",
       "total"),
    _f("+", "add-barns", "The first barn at {T} held {a} {units} and the second held {b}, so together the two barns "
       "held {c} {units}.", "The first barn at {T} held {a} {units} and the second held {b} {units}.",
       "How many {units} did the two barns hold together?", "together"),
    _f("+", "add-received", "{Actor} had {a} {units} and then received {b} more, which gave {c} {units} altogether.",
       "{Actor} had {a} {units} and then received {b} more.", "How many {units} were there altogether?",
       "altogether more"),
    _f("+", "add-bought", "{P} had {a} {units} and bought {b} more, so {P} had {c} {units} in all.",
       "{P} had {a} {units} and bought {b} more.", "How many {units} does {P} have now?", "more"),
    _f("+", "add-added", "{b} {units} were added to the {a} {units} at {T}, making {c} {units} in total.",
       "{b} {units} were added to the {a} {units} at {T}.", "How many {units} are at {T} in total?",
       "total", reversed=True),
    _f("+", "add-collected", "{P} collected {a} {units} in the morning and {b} in the evening, {c} {units} in all.",
       "", "How many {units} did {P} collect in all if {P} collected {a} in the morning and {b} in the evening?",
       "in_all question_first"),
    _f("+", "add-sum", "The sum of {a} {units} from {T} and {b} {units} from {T2} is {c} {units}.",
       "{T} sent {a} {units} and {T2} sent {b} {units}.", "What is the sum of the {units} the two towns sent?",
       "sum"),
    _f("+", "add-together", "{T} has {a} {units} and {T2} has {b}; together they have {c} {units}.",
       "{T} has {a} {units} and {T2} has {b} {units}.", "How many {units} do they have together?", "together"),
    _f("+", "add-more-than", "{T} has {a} {units} and {T2} has {b} more than {T}, so {T2} has {c} {units}.",
       "{T} has {a} {units}. {T2} has {b} more {units} than {T}.", "How many {units} does {T2} have?",
       "more"),
    _f("+", "add-found", "{P} found {b} {units} and already had {a}, so {P} has {c} {units} in total.",
       "{P} found {b} {units} and already had {a}.", "How many {units} does {P} have in total?",
       "total", reversed=True),
    _f("+", "add-sum-if", "If {T} has {a} {units} and {T2} has {b}, the sum of the {units} is {c}.",
       "", "What is the sum of the {units} if {T} has {a} and {T2} has {b}?", "sum question_first"),
    # -- subtraction -------------------------------------------------------------------------
    _f("-", "sub-sold", "Of the {a} {units} at {T}, {b} were sold, which left {c} {units}.",
       "There were {a} {units} at {T} and {b} of them were sold.", "How many {units} were left?", "left sold"),
    _f("-", "sub-gave", "{Actor} had {a} {units} and gave away {b}, so {c} {units} remained.",
       "{Actor} had {a} {units} and gave away {b} {units}.", "How many {units} remained?", "remain away"),
    _f("-", "sub-road", "The road from {T} to {T2} is {a} metres long; {b} metres are paved, so {c} metres are "
       "still unpaved.", "The road from {T} to {T2} is {a} metres long and {b} metres of it are paved.",
       "How many metres are still unpaved?", "still"),
    _f("-", "sub-missing", "{Actor} needed {a} {units} but had only {b}, so {c} {units} were still missing.",
       "{Actor} needed {a} {units} but had only {b} {units}.", "How many {units} were still missing?", "still"),
    _f("-", "sub-difference", "The difference between {a} {units} and {b} {units} is {c} {units}.",
       "{T} has {a} {units} and {T2} has {b} {units}.",
       "What is the difference between the two numbers of {units}?", "difference"),
    _f("-", "sub-how-many-more", "{T} has {a} {units} and {T2} has {b}, so {T} has {c} more {units}.",
       "{T} has {a} {units} and {T2} has {b} {units}.", "How many more {units} does {T} have than {T2}?",
       "more_than difference"),
    _f("-", "sub-fewer", "{T} has {b} {units} and {T2} has {a}, so {T} has {c} fewer {units}.",
       "{T} has {b} {units} and {T2} has {a} {units}.", "How many fewer {units} does {T} have than {T2}?",
       "fewer more_than", reversed=True),
    _f("-", "sub-stock", "{P} gave {b} {units} away from a stock of {a}, and {c} {units} were left.",
       "{P} gave {b} {units} away from a stock of {a}.", "How many {units} are left?", "left away", reversed=True),
    _f("-", "sub-lost", "{P} had {a} {units} but lost {b} of them, so {c} {units} were left.",
       "{P} had {a} {units} but lost {b} of them.", "How many {units} does {P} have left?", "left"),
    _f("-", "sub-after", "After {b} {units} were sold from the {a} at {T}, {c} were left.",
       "", "How many {units} were left after {b} were sold from the {a} at {T}?", "left sold question_first",
       reversed=True),
    _f("-", "sub-spent", "{P} had {a} crowns and spent {b} at the market of {T}, leaving {c} crowns.",
       "{P} had {a} crowns and spent {b} crowns at the market of {T}.", "How many crowns does {P} have left?",
       "left"),
    _f("-", "sub-take-away", "Taking {b} {units} away from {a} {units} leaves {c} {units}.",
       "Take {b} {units} away from {a} {units}.", "How many {units} remain?", "remain away", reversed=True),
    # -- multiplication ----------------------------------------------------------------------
    _f("*", "mul-crates", "{Actor} packed {a} crates with {b} {units} in each crate, so the crates held {c} {units}.",
       "{Actor} packed {a} crates with {b} {units} in each crate.", "How many {units} did the crates hold?",
       "each crates"),
    _f("*", "mul-orchard", "The orchard at {T} has {a} rows with {b} trees in each row, which makes {c} trees.",
       "The orchard at {T} has {a} rows with {b} trees in each row.", "How many trees does the orchard have?",
       "each rows"),
    _f("*", "mul-price", "{Actor} bought {a} {units} at {b} crowns each and paid {c} crowns.",
       "{Actor} bought {a} {units} at {b} crowns each.", "How many crowns were paid?", "each crowns"),
    _f("*", "mul-carts", "Each of the {a} carts from {T} carried {b} {units}, so the carts carried {c} {units} "
       "between them.", "Each of the {a} carts from {T} carried {b} {units}.",
       "How many {units} did the carts carry between them?", "each"),
    _f("*", "mul-per-day", "A shop in {T} sells {b} {units} per day, so in {a} days it sells {c} {units}.",
       "A shop in {T} sells {b} {units} per day.", "How many {units} does it sell in {a} days?", "per",
       reversed=True),
    _f("*", "mul-every-box", "Every box holds {b} {units} and there are {a} boxes, {c} {units} in all.",
       "Every box holds {b} {units} and there are {a} boxes.", "How many {units} are there in all?",
       "every in_all", reversed=True),
    _f("*", "mul-times", "{T} has {b} {units} and {T2} has {a} times as many, so {T2} has {c} {units}.",
       "{T} has {b} {units}. {T2} has {a} times as many {units} as {T}.", "How many {units} does {T2} have?",
       "times", reversed=True),
    _f("*", "mul-if-each", "If each crate holds {b} {units}, {a} crates hold {c} {units}.",
       "", "How many {units} are in {a} crates if each crate holds {b}?", "each crates question_first"),
    _f("*", "mul-weeks", "{P} earns {b} crowns per week, so in {a} weeks {P} earns {c} crowns.",
       "{P} earns {b} crowns per week.", "How many crowns does {P} earn in {a} weeks?", "per crowns",
       reversed=True),
    _f("*", "mul-hall", "A hall in {T} has {a} rows of {b} seats, {c} seats in all.",
       "A hall in {T} has {a} rows of {b} seats.", "How many seats are in the hall?", "rows in_all"),
    _f("*", "mul-per-cart", "{Actor} loaded {b} {units} per cart onto {a} carts, {c} {units} in total.",
       "{Actor} loaded {b} {units} per cart onto {a} carts.", "How many {units} were loaded in total?",
       "per", reversed=True),
    _f("*", "mul-families", "Each of {a} families gets {b} {units}, so {c} {units} are given out.",
       "", "If each of {a} families gets {b} {units}, how many {units} are given out?",
       "each question_first"),
    # -- division ----------------------------------------------------------------------------
    _f("/", "div-shared", "{Actor} shared {a} {units} equally among {b} families, so each family got {c}.",
       "{Actor} shared {a} {units} equally among {b} families.", "How many {units} did each family get?",
       "equally shared families"),
    _f("/", "div-load", "A load of {a} {units} was packed into {b} crates with the same number in each, {c} {units} "
       "per crate.", "A load of {a} {units} was packed into {b} crates with the same number in each.",
       "How many {units} went into each crate?", "same crates per"),
    _f("/", "div-paid", "{Actor} paid {a} crowns for {b} {units}, which is {c} crowns for each {unit}.",
       "{Actor} paid {a} crowns for {b} {units}.", "How many crowns did each {unit} cost?", "each crowns cost"),
    _f("/", "div-teams", "The {a} workers of {T} were split into {b} equal teams of {c} workers.",
       "The {a} workers of {T} were split into {b} equal teams.", "How many workers were in each team?",
       "split equal teams"),
    _f("/", "div-families", "{b} families shared {a} {units} equally, {c} {units} for each family.",
       "{b} families shared {a} {units} equally.", "How many {units} did each family get?",
       "equally shared families", reversed=True),
    _f("/", "div-walk", "{P} walked {a} metres in {b} minutes, {c} metres per minute.",
       "{P} walked {a} metres in {b} minutes.", "How many metres did {P} walk per minute?", "per"),
    _f("/", "div-fill", "If {a} {units} fill {b} crates equally, each crate holds {c} {units}.",
       "", "How many {units} does each crate hold if {a} {units} fill {b} crates equally?",
       "equally crates question_first"),
    _f("/", "div-shops", "{a} {units} were divided among {b} shops in {T}, so each shop got {c}.",
       "{a} {units} were divided among {b} shops in {T}.", "How many {units} did each shop get?", "divided each"),
    _f("/", "div-made-teams", "{b} teams were made from the {a} workers of {T}, {c} workers in each team.",
       "{b} teams were made from the {a} workers of {T}, with the same number in each team.",
       "How many workers were in each team?", "teams same", reversed=True),
    _f("/", "div-cost", "{b} {units} cost {a} crowns in {T}, so one {unit} costs {c} crowns.",
       "{b} {units} cost {a} crowns in {T}.", "What does one {unit} cost in crowns?", "crowns cost",
       reversed=True),
    _f("/", "div-piles", "{P} split {a} {units} into {b} equal piles of {c} {units}.",
       "{P} split {a} {units} into {b} equal piles.", "How many {units} are in each pile?", "split equal"),
    _f("/", "div-trips", "A cart carried {a} {units} in {b} trips, {c} {units} per trip.",
       "A cart carried {a} {units} in {b} trips, the same load on each trip.",
       "How many {units} did the cart carry per trip?", "per same"),
]
# Forms that only training text uses (``world.extra_train_forms``): never held out, so the split of
# :data:`FORMS` and the ``math_unseen`` forms stay those of the seed. More ways to say each operation in training
# make the held-out forms a new composition of more known words: other verbs, a number in the question, two
# sentences, the bare operation words (``plus``, ``multiplied by``), a comparison ("how many more ... need").
# The last four of each operation say the scene words of other operations' forms (families, crowns paid, a
# cart's trips, an orchard's trees, a hall's seats, teams, weeks): in :data:`FORMS` most scene words come with
# one operation only, and a model then takes the operation from the scene ("families" → ÷) instead of from the
# words that state it (SCENE_WORDS; ``tests/test_world.py`` checks that training says each with two or more).
EXTRA_FORMS = [
    _f("+", "add-trips", "On the first trip the cart brought {a} {units} to {T} and on the second trip {b}, {c} "
       "{units} in total.", "On the first trip the cart brought {a} {units} to {T} and on the second trip {b} "
       "{units}.", "How many {units} did the cart bring in total?", "total"),
    _f("+", "add-gift", "{P} owned {a} {units}. A friend from {T} gave {P} another {b}, so now {P} owns {c} {units}.",
       "{P} owned {a} {units}. A friend from {T} gave {P} another {b} {units}.", "How many {units} does {P} own now?",
       "another"),
    _f("+", "add-keeps-if", "If {T} keeps {a} {units} and {T2} keeps {b}, the total is {c} {units}.",
       "", "What is the total number of {units} if {T} keeps {a} and {T2} keeps {b}?", "total question_first"),
    _f("+", "add-rose", "The stock of {units} at {T} was {a} and rose by {b} to {c}.",
       "The stock of {units} at {T} was {a} and rose by {b}.", "What is the stock of {units} at {T} now?", "rose"),
    _f("+", "add-joined", "{b} {units} joined the {a} {units} already in the yard at {T}, so the yard held {c} "
       "{units}.",
       "{b} {units} joined the {a} {units} already in the yard at {T}.", "How many {units} are in the yard now?",
       "joined", reversed=True),
    _f("+", "add-plus", "{a} {units} plus {b} {units} is {c} {units}.",
       "", "How many {units} is {a} {units} plus {b} {units}?", "plus question_first"),
    _f("+", "add-two-days", "{P} made {a} {units} on Friday. On Saturday {P} made {b}. Over the two days {P} made "
       "{c} {units}.", "{P} made {a} {units} on Friday. On Saturday {P} made {b} {units}.",
       "How many {units} did {P} make over the two days?", "two_days"),
    _f("+", "add-got", "{Actor} started with {a} {units} and got {b} new ones, ending with {c}.",
       "{Actor} started with {a} {units} and got {b} new ones.", "How many {units} were there at the end?", "got"),
    # -- subtraction -------------------------------------------------------------------------
    _f("-", "sub-broke", "{P} had {a} {units}; {b} of them broke, and {c} {units} were still whole.",
       "{P} had {a} {units} and {b} of them broke.", "How many {units} were still whole?", "broke"),
    _f("-", "sub-need-more", "{P} needs {a} {units} and has {b}, so {P} needs {c} more.",
       "{P} needs {a} {units} and has {b} {units}.", "How many more {units} does {P} need?", "more need"),
    _f("-", "sub-exceed", "{T} counted {a} {units} and {T2} counted {b}, so {T} counted {c} more than {T2}.",
       "{T} counted {a} {units} and {T2} counted {b} {units}.",
       "By how many {units} does the count of {T} exceed that of {T2}?", "exceed more_than"),
    _f("-", "sub-minus", "{a} {units} minus {b} {units} is {c} {units}.",
       "", "How many {units} is {a} {units} minus {b} {units}?", "minus question_first"),
    _f("-", "sub-removed", "{b} {units} were removed from a pile of {a}, leaving {c} {units}.",
       "{b} {units} were removed from a pile of {a} {units}.", "How many {units} are in the pile now?", "removed",
       reversed=True),
    _f("-", "sub-fell", "The number of {units} in {T} fell from {a} to {b}, a drop of {c}.",
       "The number of {units} in {T} fell from {a} to {b}.", "By how many did the number of {units} fall?", "fell"),
    _f("-", "sub-unused", "The workshop at {T} used {b} of its {a} {units}, so {c} {units} are unused.",
       "The workshop at {T} used {b} of its {a} {units}.", "How many {units} are unused?", "used", reversed=True),
    _f("-", "sub-hands-out", "{Actor} started with {a} {units}, handed out {b} and kept {c}.",
       "", "If {Actor} starts with {a} {units} and hands out {b}, how many {units} are left?",
       "left question_first"),
    # -- multiplication ----------------------------------------------------------------------
    _f("*", "mul-bags", "There are {a} bags and each bag has {b} {units} in it, {c} {units} altogether.",
       "There are {a} bags and each bag has {b} {units} in it.", "How many {units} are there altogether?", "each"),
    _f("*", "mul-a-day", "For {a} days {Actor} needed {b} {units} a day, {c} {units} in total.",
       "For {a} days {Actor} needed {b} {units} a day.", "How many {units} were needed in total?", "a_day"),
    _f("*", "mul-multiplied", "{a} multiplied by {b} is {c}.", "", "What is {a} multiplied by {b}?",
       "multiplied question_first"),
    _f("*", "mul-stacks", "{P} made {a} stacks of {b} {units}, {c} {units} in all.",
       "{P} made {a} stacks of {b} {units}.", "How many {units} were in the stacks?", "stacks"),
    _f("*", "mul-one-costs", "One {unit} costs {b} crowns, so {a} of them cost {c} crowns.",
       "One {unit} costs {b} crowns.", "What do {a} {units} cost?", "costs", reversed=True),
    _f("*", "mul-workers", "{a} workers each carried {b} {units}, so the workers carried {c} {units}.",
       "{a} workers each carried {b} {units}.", "How many {units} did the workers carry?", "each"),
    _f("*", "mul-product", "The product of {a} and {b} is {c}.", "", "What is the product of {a} and {b}?",
       "product question_first"),
    _f("*", "mul-every-month", "{T} sends {b} {units} to the coast every month; over {a} months that is {c} {units}.",
       "{T} sends {b} {units} to the coast every month.", "How many {units} does {T} send in {a} months?", "every",
       reversed=True),
    # -- division ----------------------------------------------------------------------------
    _f("/", "div-boxes-of", "{a} {units} were packed in boxes of {b}, which filled {c} boxes.",
       "{a} {units} were packed in boxes of {b}.", "How many boxes were filled?", "boxes_of"),
    _f("/", "div-divided-by", "{a} divided by {b} is {c}.", "", "What is {a} divided by {b}?",
       "divided question_first"),
    _f("/", "div-bill", "{b} friends split a bill of {a} crowns evenly, {c} crowns each.",
       "{b} friends split a bill of {a} crowns evenly.", "How many crowns did each friend pay?", "split evenly",
       reversed=True),
    _f("/", "div-groups-of", "From {a} {units}, {c} groups of {b} can be made.", "",
       "How many groups of {b} can be made from {a} {units}?", "groups question_first", reversed=True),
    _f("/", "div-a-day", "{Actor} made {a} crowns in {b} days, {c} crowns a day.",
       "{Actor} made {a} crowns in {b} days, the same each day.", "How many crowns a day is that?", "a_day same"),
    _f("/", "div-children", "{a} {units} were handed out to {b} children, the same number to each, {c} {units} per "
       "child.", "{a} {units} were handed out to {b} children, the same number to each.",
       "How many {units} did each child get?", "same each"),
    _f("/", "div-rows", "{P} set {a} {units} out in {b} equal rows, {c} in each row.",
       "{P} set {a} {units} out in {b} equal rows.", "How many {units} are in each row?", "equal rows"),
    _f("/", "div-stalls", "Among {b} stalls at {T}, {a} {units} were shared out evenly, so each stall had {c}.",
       "Among {b} stalls at {T}, {a} {units} were shared out evenly.", "How many {units} did each stall have?",
       "shared evenly", reversed=True),
    # -- scene words of one operation's forms said with another operation ---------------------------
    _f("+", "add-families-towns", "{a} {units} went to the families of {T} and {b} to the families of {T2}, {c} "
       "{units} in all.", "{a} {units} went to the families of {T} and {b} to the families of {T2}.",
       "How many {units} went to the families of the two towns in all?", "in_all"),
    _f("+", "add-paid-twice", "{P} paid {a} crowns in {T} and {b} crowns in {T2}, {c} crowns in total.",
       "{P} paid {a} crowns in {T} and {b} crowns in {T2}.", "How many crowns did {P} pay in total?", "total"),
    _f("+", "add-orchards", "The orchard at {T} has {a} trees and the orchard at {T2} has {b}, {c} trees together.",
       "The orchard at {T} has {a} trees and the orchard at {T2} has {b} trees.",
       "How many trees do the two orchards have together?", "together"),
    _f("+", "add-weeks", "{P} earned {a} crowns in the first week and {b} in the second week, {c} crowns in all.",
       "{P} earned {a} crowns in the first week and {b} in the second week.",
       "How many crowns did {P} earn in the two weeks?", "in_all"),
    _f("-", "sub-families-moved", "Of the {a} families in {T}, {b} moved to {T2}, which left {c} families.",
       "Of the {a} families in {T}, {b} moved to {T2}.", "How many families were left in {T}?", "left"),
    _f("-", "sub-paid-left", "{P} had {a} crowns and paid {b} of them for a cart, so {c} crowns were left.",
       "{P} had {a} crowns and paid {b} of them for a cart.", "How many crowns were left?", "left"),
    _f("-", "sub-seats-free", "A hall in {T} has {a} seats and {b} of them are taken, so {c} seats are still free.",
       "A hall in {T} has {a} seats and {b} of them are taken.", "How many seats are still free?", "still"),
    _f("-", "sub-trip-rest", "A cart had to move {a} {units} and moved {b} on its first trip, so {c} {units} were "
       "still to move.", "A cart had to move {a} {units} and moved {b} {units} on its first trip.",
       "How many {units} were still to move?", "still"),
    _f("*", "mul-trips-each", "The cart made {a} trips with {b} {units} on each trip, {c} {units} in all.",
       "The cart made {a} trips with {b} {units} on each trip.", "How many {units} did the cart move in all?",
       "each in_all"),
    _f("*", "mul-teams-of", "{a} teams of {b} workers came from {T}, {c} workers in all.",
       "{a} teams of {b} workers came from {T}.", "How many workers came from {T}?", "teams in_all"),
    _f("*", "mul-paid-weekly", "{P} paid {b} crowns a week for {a} weeks, {c} crowns in all.",
       "{P} paid {b} crowns a week for {a} weeks.", "How many crowns did {P} pay in all?", "a_week in_all",
       reversed=True),
    _f("*", "mul-families-keep", "There are {a} families in {T} and each family keeps {b} {units}, {c} {units} "
       "in all.", "There are {a} families in {T} and each family keeps {b} {units}.",
       "How many {units} do the families keep?", "each families"),
    _f("/", "div-orchard-rows", "The {a} trees of the orchard at {T} stand in {b} equal rows, {c} trees in each row.",
       "The {a} trees of the orchard at {T} stand in {b} equal rows.", "How many trees are in each row?",
       "equal rows"),
    _f("/", "div-hall-rows", "A hall in {T} has {a} seats in {b} equal rows, {c} seats per row.",
       "A hall in {T} has {a} seats in {b} equal rows.", "How many seats are in each row?", "equal rows per"),
    _f("/", "div-weeks", "{P} earned {a} crowns in {b} weeks, the same each week, {c} crowns a week.",
       "{P} earned {a} crowns in {b} weeks, the same each week.", "How many crowns did {P} earn each week?",
       "same each"),
    _f("/", "div-carts-loaded", "{a} {units} were loaded onto {b} carts, the same number on each cart, {c} per cart.",
       "{a} {units} were loaded onto {b} carts, the same number on each cart.",
       "How many {units} were on each cart?", "same each"),
]
# Forms that training text uses with ``world.scene_forms``: never held out. In :data:`FORMS` and
# :data:`EXTRA_FORMS` many words that state no operation come with one operation only ("bought" says + in
# add-bought, × in mul-price; "trips" × in training, ÷ in div-trips), so holding a form out can leave its
# words saying another operation in every training text. These say each such word with an operation its forms
# do not use, so that for every seed each word of a held-out form other than its cue words is said with two
# operations or more in training (``tests/test_world.py``): the operation has to come from the cue words.
SCENE_FORMS = [
    # -- addition ----------------------------------------------------------------------------
    _f("+", "add-spent-shop", "{P} spent {a} crowns at the market of {T} and {b} crowns at a shop, {c} crowns in all.",
       "{P} spent {a} crowns at the market of {T} and {b} crowns at a shop.", "How many crowns did {P} spend in all?",
       "in_all"),
    _f("+", "add-loaded-carts", "{a} {units} were loaded onto one cart and {b} onto another, {c} {units} in total.",
       "{a} {units} were loaded onto one cart and {b} {units} onto another.",
       "How many {units} were loaded onto the carts in total?", "total"),
    _f("+", "add-road-added", "The road from {T} was {a} metres long until {b} metres were added to it, making it {c} "
       "metres long.", "The road from {T} was {a} metres long until {b} metres were added to it.",
       "How long is the road now, in metres?", "added"),
    _f("+", "add-walked-day", "{P} walked for {a} minutes in the morning and for {b} minutes in the evening, {c} "
       "minutes in all.", "{P} walked for {a} minutes in the morning and for {b} minutes in the evening.",
       "How many minutes did {P} walk in all?", "in_all"),
    _f("+", "add-teams-packed", "One team packed {a} {units} and a second team packed {b}, so the teams packed {c} "
       "{units} together.", "One team packed {a} {units} and a second team packed {b} {units}.",
       "How many {units} did the two teams pack together?", "together"),
    _f("+", "add-pile-grew", "A pile held {a} {units} and a cart carried {b} more into it, so the pile grew to {c}.",
       "A pile held {a} {units} and a cart carried {b} more {units} into it.", "How many {units} are in the pile now?",
       "more"),
    _f("+", "add-trips-needed", "For its two trips {T} needed {a} {units} and then {b} more, {c} {units} in all.",
       "For its two trips {T} needed {a} {units} and then {b} more {units}.",
       "How many {units} did {T} need for the trips?", "more"),
    _f("+", "add-gets-given", "{P} gets {a} {units} from {T} and is given {b} more by {T2}, so {P} gets {c} {units} "
       "in all.", "{P} gets {a} {units} from {T} and is given {b} more {units} by {T2}.",
       "How many {units} does {P} get in all?", "more in_all"),
    _f("+", "add-two-rows", "A row of {a} {units} and a row of {b} {units} makes {c} {units}.",
       "There is a row of {a} {units} and a row of {b} {units}.", "How many {units} do the two rows make?", "two_rows"),
    _f("+", "add-box-costs", "One {unit} costs {a} crowns and its box costs {b} crowns, {c} crowns for both.",
       "One {unit} costs {a} crowns and its box costs {b} crowns.", "What do the {unit} and its box cost together?",
       "together"),
    _f("+", "add-went-load", "{a} {units} went into the first load and {b} into the second, {c} {units} in all.",
       "{a} {units} went into the first load and {b} {units} into the second.",
       "How many {units} went into the two loads?", "in_all"),
    _f("+", "add-fill-barns", "{a} {units} fill one barn and {b} fill another, {c} {units} in all.",
       "{a} {units} fill one barn and {b} {units} fill another.", "How many {units} fill the two barns?", "in_all"),
    _f("+", "add-sells-between", "{T} sells {a} {units} a year and {T2} sells {b}, {c} {units} between them.",
       "{T} sells {a} {units} a year and {T2} sells {b} {units}.",
       "How many {units} do the two towns sell a year between them?", "between"),
        _f("+", "add-earns-two", "{P} earns {a} crowns at the mill and {b} crowns at the market, {c} crowns in all.",
       "{P} earns {a} crowns at the mill and {b} crowns at the market.", "How many crowns does {P} earn in all?",
       "in_all"),
    _f("+", "add-leaves-two", "{P} leaves {a} {units} at {T} and {b} at {T2}, {c} {units} in all.",
       "{P} leaves {a} {units} at {T} and {b} {units} at {T2}.", "How many {units} does {P} leave?", "in_all"),
    _f("+", "add-minute-metres", "In the first minute {P} walked {a} metres and in the next minute {b} metres, {c} "
       "metres in all.", "In the first minute {P} walked {a} metres and in the next minute {b} metres.",
       "How many metres did {P} walk in the two minutes?", "in_all"),
    _f("+", "add-numbers", "Adding the numbers {a} and {b} gives {c}.", "", "What does adding the numbers {a} and {b} "
       "give?", "adding question_first"),
    _f("+", "add-paved-more", "The workers paved {a} metres of road and then {b} metres more, {c} metres in all.",
       "The workers paved {a} metres of road and then {b} metres more.", "How many metres did the workers pave?",
       "more"),
    _f("+", "add-remained-two", "{a} {units} remained in one barn and {b} in another, {c} {units} in all.",
       "{a} {units} remained in one barn and {b} {units} in another.", "How many {units} remained in the barns?",
       "in_all"),
    _f("+", "add-unpaved-two", "{a} metres of one road and {b} metres of another are unpaved, {c} metres in all.",
       "{a} metres of one road and {b} metres of another are unpaved.", "How many metres are unpaved in all?",
       "in_all"),
    # -- subtraction -------------------------------------------------------------------------
    _f("-", "sub-bought-sold", "{P} bought {a} {units} and sold {b} of them, so {P} kept {c}.",
       "{P} bought {a} {units} and sold {b} of them.", "How many {units} did {P} keep?", "of_them"),
    _f("-", "sub-stock-sold", "The stock at {T} was {a} {units} until {b} were sold, leaving {c} in stock.",
       "The stock at {T} was {a} {units} until {b} were sold.", "How many {units} are still in stock?", "still"),
    _f("-", "sub-gave-stayed", "Of the {a} {units} {P} had, {P} gave {b} to {T}, and {c} {units} stayed.",
       "Of the {a} {units} {P} had, {P} gave {b} to {T}.", "How many {units} did {P} still have?", "still"),
    _f("-", "sub-held-taken", "The carts held {a} {units}, and {b} of them were taken off at {T}, so {c} {units} "
       "stayed on the carts.", "The carts held {a} {units}, and {b} of them were taken off at {T}.",
       "How many {units} stayed on the carts?", "of_them"),
    _f("-", "sub-found-lost", "{P} found {a} {units} on Monday and lost {b} of them on Tuesday, so {P} still had {c}.",
       "{P} found {a} {units} on Monday and lost {b} of them on Tuesday.", "How many {units} did {P} still have?",
       "still"),
    _f("-", "sub-sent-towns", "{T} had {a} {units} and sent {b} of them to other towns, which left {c} {units} in {T}.",
       "{T} had {a} {units} and sent {b} of them to other towns.", "How many {units} were left in {T}?", "left"),
    _f("-", "sub-already-sold", "Of {a} {units} for sale, {b} were already sold, so {c} are still to sell.",
       "Of {a} {units} for sale, {b} were already sold.", "How many {units} are still to sell?", "still"),
    _f("-", "sub-before-autumn", "In spring {T} had {a} {units}, and {b} were used up before autumn, which left {c}.",
       "In spring {T} had {a} {units}, and {b} of them were used up before autumn.",
       "How many {units} were left in autumn?", "left"),
    _f("-", "sub-earns-saves", "{P} earns {a} crowns a month and spends {b} of them, saving {c} crowns.",
       "{P} earns {a} crowns a month and spends {b} of them.", "How many crowns does {P} save a month?", "of_them"),
    _f("-", "sub-collected-kept", "{P} collected {a} {units} in the morning and handed {b} of them out in the "
       "evening, keeping {c}.", "{P} collected {a} {units} in the morning and handed {b} of them out in the evening.",
       "How many {units} did {P} keep?", "of_them"),
    _f("-", "sub-received-outside", "{T} received {a} {units} and put {b} of them into a barn, leaving {c} outside.",
       "{T} received {a} {units} and put {b} of them into a barn.", "How many {units} were left outside?", "left"),
    _f("-", "sub-missing-among", "Among {a} {units} sent to {T}, {b} went missing, so {c} arrived.",
       "Among {a} {units} sent to {T}, {b} went missing.", "How many {units} arrived in {T}?", "missing"),
    _f("-", "sub-carry-more", "A cart could carry {a} {units} and already had {b} on it, so it could carry {c} "
       "more.",
       "A cart could carry {a} {units} and already had {b} {units} on it.", "How many more {units} could it carry?",
       "already"),
    _f("-", "sub-second-fewer", "The first barn held {a} {units} and the second held {b} fewer, so the second held "
       "{c}.", "The first barn held {a} {units} and the second held {b} fewer.",
       "How many {units} did the second barn hold?", "fewer"),
    # -- multiplication ----------------------------------------------------------------------
    _f("*", "mul-bought-boxes", "{P} bought {a} boxes with {b} {units} in each box, {c} {units} in all.",
       "{P} bought {a} boxes with {b} {units} in each box.", "How many {units} did {P} buy?", "each"),
    _f("*", "mul-shops-sold", "Each of the {a} shops at the market sold {b} {units}, {c} {units} in all.",
       "Each of the {a} shops at the market sold {b} {units}.", "How many {units} did the shops sell?", "each"),
    _f("*", "mul-walked-minutes", "{P} walked {b} metres every minute for {a} minutes, {c} metres in all.",
       "{P} walked {b} metres every minute for {a} minutes.", "How many metres did {P} walk?", "every",
       reversed=True),
    _f("*", "mul-lost-weeks", "{P} lost {b} crowns a week for {a} weeks, {c} crowns in all.",
       "{P} lost {b} crowns a week for {a} weeks.", "How many crowns did {P} lose?", "a_week", reversed=True),
    _f("*", "mul-children-collected", "{a} children collected {b} {units} each, {c} {units} in all.",
       "{a} children collected {b} {units} each.", "How many {units} did the children collect?", "each"),
    _f("*", "mul-added-rows", "{P} added {a} rows of {b} {units} to the barn, {c} {units} in all.",
       "{P} added {a} rows of {b} {units} to the barn.", "How many {units} did {P} add to the barn?", "rows_of"),
    _f("*", "mul-sent-carts", "{T} sent {a} carts with {b} {units} on each, {c} {units} in all.",
       "{T} sent {a} carts with {b} {units} on each.", "How many {units} did {T} send?", "each"),
    _f("*", "mul-stock-weekly", "{T} adds {b} {units} to its stock every week; in {a} weeks that is {c} {units}.",
       "{T} adds {b} {units} to its stock every week.", "How many {units} does {T} add in {a} weeks?", "every",
       reversed=True),
    _f("*", "mul-found-piles", "{P} found {a} piles of {b} {units}, {c} {units} in all.",
       "{P} found {a} piles of {b} {units}.", "How many {units} did {P} find?", "piles_of"),
    _f("*", "mul-towns-received", "{a} towns each received {b} {units}, {c} {units} in all.",
       "{a} towns each received {b} {units}.", "How many {units} did the towns receive?", "each"),
    _f("*", "mul-loads-take", "Each load a cart can take is {b} {units}, so {a} loads are {c} {units}.",
       "Each load a cart can take is {b} {units}.", "How many {units} are in {a} loads?", "each", reversed=True),
        _f("*", "mul-seasons-weekly", "In spring and autumn {P} sold {b} {units} a week for {a} weeks, {c} {units} in "
       "all.", "In spring and autumn {P} sold {b} {units} a week for {a} weeks.",
       "How many {units} did {P} sell in spring and autumn?", "a_week", reversed=True),
    _f("*", "mul-counted-rows", "{P} counted {a} rows of {b} {units}, {c} {units} in all.",
       "{P} counted {a} rows of {b} {units}.", "How many {units} did {P} count?", "rows_of"),
    _f("*", "mul-taking-trips", "Taking {b} {units} on each trip, a cart that makes {a} trips moves {c} {units}.",
       "Taking {b} {units} on each trip, a cart makes {a} trips.", "How many {units} does the cart move?", "each",
       reversed=True),
    _f("*", "mul-carts-leaving", "{a} carts came to the market, each leaving {b} {units}, {c} {units} in all.",
       "{a} carts came to the market, each leaving {b} {units}.", "How many {units} did the carts leave?", "each"),
    _f("*", "mul-bags-making", "{P} put {b} {units} in each of {a} bags, making {c} in all.",
       "{P} put {b} {units} in each of {a} bags.", "How many {units} are in the bags?", "each", reversed=True),
    _f("*", "mul-missing-boxes", "{b} {units} were missing from each of {a} boxes, {c} missing in all.",
       "{b} {units} were missing from each of {a} boxes.", "How many {units} were missing?", "each", reversed=True),
    _f("*", "mul-monday-hours", "On Monday and Tuesday {P} made {b} {units} an hour for {a} hours, {c} in all.",
       "On Monday and Tuesday {P} made {b} {units} an hour for {a} hours.", "How many {units} did {P} make?",
       "an_hour", reversed=True),
    _f("*", "mul-numbers", "The two numbers {a} and {b} multiplied give {c}.", "",
       "What do the two numbers {a} and {b} multiplied give?", "multiplied question_first"),
    # -- division ----------------------------------------------------------------------------
    _f("/", "div-bought-cost", "{P} bought {b} {units} for {a} crowns, so each {unit} cost {c} crowns.",
       "{P} bought {b} {units} for {a} crowns.", "What did each {unit} cost?", "each cost", reversed=True),
    _f("/", "div-spent-days", "{P} spent {a} crowns at the market in {b} days, the same each day, {c} crowns a day.",
       "{P} spent {a} crowns at the market in {b} days, the same each day.", "How many crowns did {P} spend a day?",
       "same each"),
    _f("/", "div-given-teams", "{a} {units} were given to {b} teams, the same to each team, so each team gets {c}.",
       "{a} {units} were given to {b} teams, the same to each team.", "How many {units} does each team get?",
       "same each"),
    _f("/", "div-held-barns", "{b} barns held {a} {units} between them, the same in each barn, {c} {units} a barn.",
       "{b} barns held {a} {units} between them, the same in each barn.", "How many {units} did each barn hold?",
       "same each", reversed=True),
    _f("/", "div-collected-piles", "In the morning {P} collected {a} {units} and put them in {b} equal piles, {c} in "
       "each pile.", "In the morning {P} collected {a} {units} and put them in {b} equal piles.",
       "How many {units} are in each pile?", "equal each"),
    _f("/", "div-sold-towns", "{a} {units} were sold to {b} towns, the same number to each town, {c} {units} per town.",
       "{a} {units} were sold to {b} towns, the same number to each town.", "How many {units} did each town get?",
       "same each per"),
    _f("/", "div-road-parts", "A road of {a} metres was paved in {b} equal parts, {c} metres a part.",
       "A road of {a} metres was paved in {b} equal parts.", "How many metres long was each part?", "equal each"),
    _f("/", "div-makes-days", "{P} makes {a} {units} in {b} days, the same number each day, {c} a day.",
       "{P} makes {a} {units} in {b} days, the same number each day.", "How many {units} does {P} make a day?",
       "same each"),
    _f("/", "div-collect-days", "{P} had to collect {a} {units} in {b} days, the same each day, {c} a day.",
       "{P} had to collect {a} {units} in {b} days, the same each day.", "How many {units} did {P} collect a day?",
       "same each"),
    _f("/", "div-take-trips", "Moving {a} {units} {b} at a time takes {c} trips.", "{P} has to move {a} {units}, {b} "
       "at a time.", "How many trips does it take?", "at_a_time"),
    _f("/", "div-remained-piles", "{a} {units} remained and were put into {b} equal piles, {c} in each pile.",
       "{a} {units} remained and were put into {b} equal piles.", "How many {units} are in each pile?", "equal each"),
    _f("/", "div-unpaved-parts", "The {a} unpaved metres of a road were split into {b} equal parts, {c} metres each.",
       "The {a} unpaved metres of a road were split into {b} equal parts.", "How many metres is each part?",
       "split equal"),
    _f("/", "div-sells-weeks", "{T} sells {a} {units} in {b} weeks, the same each week, {c} a week.",
       "{T} sells {a} {units} in {b} weeks, the same each week.", "How many {units} does {T} sell a week?",
       "same each"),
    _f("/", "div-taking-loads", "Taking {a} {units} to {T} in {b} equal loads leaves {c} {units} in each load.",
       "{P} is taking {a} {units} to {T} in {b} equal loads.", "How many {units} are in each load?", "equal each"),
]
SCENE_WORDS = ("families", "crowns", "paid", "cart", "trip", "orchard", "trees", "hall", "seats", "rows", "teams",
               "workers", "weeks", "earned")
"""Words that set a scene and state no operation; with the extra forms training says each with two or more."""
# No object word in them: held-out object words are drawn from those no form writes (split_forms).
assert not {w for u in UNITS for w in u} & set(re.findall(r"[a-z]+", " ".join(
    f.story + f.body + f.question for f in EXTRA_FORMS).lower())), "an object word in EXTRA_FORMS"
assert not {w for u in UNITS for w in u} & set(re.findall(r"[a-z]+", " ".join(
    f.story + f.body + f.question for f in SCENE_FORMS).lower())), "an object word in SCENE_FORMS"
FORM_KEYS = {f.key: f for f in [*FORMS, *EXTRA_FORMS, *SCENE_FORMS]}
assert len(FORM_KEYS) == len(FORMS) + len(EXTRA_FORMS) + len(SCENE_FORMS)


@dataclass(frozen=True)
class Split:
    """Which forms and words training text may use, and which only ``*_unseen`` evaluation items use."""

    train_forms: tuple[Form, ...]
    heldout_forms: tuple[Form, ...]
    train_units: tuple[tuple[str, str], ...]
    heldout_units: tuple[tuple[str, str], ...]
    train_names: tuple[str, ...]
    heldout_names: tuple[str, ...]

    @property
    def extra(self) -> bool:
        """Training uses :data:`EXTRA_FORMS` as well (``world.extra_train_forms``)."""
        return EXTRA_FORMS[0] in self.train_forms

    @property
    def scene(self) -> bool:
        """Training uses :data:`SCENE_FORMS` as well (``world.scene_forms``)."""
        return SCENE_FORMS[0] in self.train_forms

    def forms(self, op: str, heldout: bool = False) -> list[Form]:
        return [f for f in (self.heldout_forms if heldout else self.train_forms) if f.op == op]

    def record(self) -> dict:
        return {"train_forms": [f.key for f in self.train_forms], "heldout_forms": [f.key for f in self.heldout_forms],
                "train_units": [u for u, _ in self.train_units], "heldout_units": [u for u, _ in self.heldout_units],
                "train_names": list(self.train_names), "heldout_names": list(self.heldout_names)}


def _valid_heldout(op_forms: list[Form], held: list[Form]) -> bool:
    train = [f for f in op_forms if f not in held]
    known = {c for f in train for c in f.cues}
    return (all(set(f.cues) <= known for f in held) and any(f.reversed for f in train)
            and any(not f.reversed for f in train))


def split_forms(seed: int, heldout_per_op: int = 4, vocab_heldout: float = 0.25, extra_train: bool = False,
                scene_train: bool = False) -> Split:
    """Hold out ``heldout_per_op`` forms of each operation and a share of the
    objects and first names, by seed (see the module docstring); with
    ``extra_train`` the training forms add :data:`EXTRA_FORMS`, with
    ``scene_train`` :data:`SCENE_FORMS` (the held-out ones stay the same)."""
    rng = random.Random(f"{seed}-forms")
    held: list[Form] = []
    for op in OPS:
        op_forms = [f for f in FORMS if f.op == op]
        for _ in range(10_000):
            pick = rng.sample(op_forms, heldout_per_op)
            if _valid_heldout(op_forms, pick):
                held += pick
                break
        else:
            raise ValueError(f"world: no split of the {op} forms keeps every held-out cue in training")
    # Only words no other text of the world uses can be held out ("jar" is in "a jar of honey").
    from toolformer.world.entities import GOODS

    other_text = set(re.findall(r"[a-z]+", " ".join([*GOODS, *(f.story + f.body + f.question for f in FORMS)])))
    eligible = [u for u in UNITS if not set(u) & other_text]
    names = list(FIRST_NAMES)
    rng.shuffle(eligible)
    rng.shuffle(names)
    nu, nn = round(len(UNITS) * vocab_heldout), round(len(names) * vocab_heldout)
    held_units = eligible[:nu]
    train = ([f for f in FORMS if f not in held] + (EXTRA_FORMS if extra_train else [])
             + (SCENE_FORMS if scene_train else []))
    return Split(tuple(train), tuple(f for f in FORMS if f in held),
                 tuple(u for u in UNITS if u not in held_units), tuple(held_units), tuple(names[nn:]),
                 tuple(names[:nn]))


# Ranges of operands by size: "small" mixes 2- to 4-digit numbers (pre-training),
# "large" keeps the 3-4-digit operations the tiny model cannot compute.
SIZES = ("small", "large")


def _operands(rng: random.Random, op: str, size: str) -> tuple[int, int]:
    if op in "+-":
        lo = rng.choice([10, 100, 1000, 1000]) if size == "small" else rng.choice([100, 1000])
        if op == "+":
            return rng.randint(lo, lo * 10 - 1), rng.randint(lo, lo * 10 - 1)
        a = rng.randint(lo * 2, lo * 10 - 1)
        return a, rng.randint(lo if size == "large" else max(2, a // 20), a - 1)
    # * and /: a 2-3-digit factor times a 1-2-digit factor; the quotient of / is the 2-3-digit one.
    big = rng.randint(12, 99) if size == "small" and rng.random() < 0.4 else rng.randint(12, 999)
    small = rng.randint(3, 99)
    return (big, small) if op == "*" else (big * small, small)


def written(n: int, separators: bool) -> str:
    """A number as the text writes it: ``6,305`` with separators, else ``6305``."""
    return f"{n:,}" if separators else str(n)


@dataclass
class Item:
    """One arithmetic fact ``a op b = c`` dressed in a form."""

    form: Form
    a: int
    b: int
    c: str
    slots: dict
    separators: bool = False
    """Operands of 1,000 and more written with thousands separators (the answer and the call never are)."""

    @property
    def op(self) -> str:
        return self.form.op

    @property
    def call_input(self) -> str:
        return f"{self.a} {self.op} {self.b}"

    def _fill(self, text: str) -> str:
        return text.format(a=written(self.a, self.separators), b=written(self.b, self.separators), **self.slots)

    def story(self) -> tuple[str, int]:
        """The story sentence and the character offset of the answer in it."""
        head, tail = self.form.story.split("{c}")
        head = self._fill(head)
        return head + self.c + self._fill(tail), len(head)

    def body(self) -> str:
        return self._fill(self.form.body)

    def question(self) -> str:
        return self._fill(self.form.question)

    def prompt(self) -> str:
        """Body and question, as an evaluation prompt reads them."""
        return f"{self.body()} {self.question()}".strip()

    def problem(self) -> tuple[str, int]:
        """Body, question and ``The answer is c.``; with the answer's offset."""
        head = f"{self.prompt()} The answer is "
        return f"{head}{self.c}.", len(head)

    def numbers(self) -> list[tuple[str, str]]:
        """(number, unit word or "") for filler sentences that repeat them."""
        units, story = self.slots["units"], self.form.story
        return [(written(self.a, self.separators), units if "{a} {units}" in story else ""),
                (written(self.b, self.separators), units if "{b} {units}" in story else ""),
                (self.c, units if "{c} {units}" in story else "")]


def make_item(rng: random.Random, size: str, towns: list[str], people: list[str], forms: list[Form],
              units: list[tuple[str, str]], names: list[str], separators: float = 0.0) -> Item:
    """A random arithmetic item in one of ``forms``, with one of ``units`` and a
    person from ``people`` or ``names``; numbers written with separators at the
    rate ``separators``."""
    form = rng.choice(forms)
    while True:
        a, b = _operands(rng, form.op, size)
        c = str(APPLY[form.op](a, b))  # whole numbers: / divides exactly (tests check against the Calculator)
        if c not in (str(a), str(b)):
            break
    return Item(form, a, b, c, fill_slots(rng, towns, people, units, names), rng.random() < separators)


def fill_slots(rng: random.Random, towns: list[str], people: list[str], units: list[tuple[str, str]],
           names: list[str]) -> dict:
    """The words of an item: a unit, two towns, a person from ``people`` or ``names``, an actor."""
    plural, singular = rng.choice(units)
    t, t2 = rng.sample(towns, 2)
    person = rng.choice(names) if rng.random() < 0.5 else rng.choice(people)
    actor = rng.choice(ACTORS).format(T=t, P=person)
    return {"Actor": actor, "units": plural, "unit": singular, "T": t, "T2": t2, "P": person}


# Sentences that repeat an earlier number: in-context copying is what lets a
# call's result, put before the text, lower the loss at the answer.
FILLERS = [
    "The clerk wrote {n} in the ledger.",
    "Later that week the {n} {units} were counted again.",
    "Nobody in {T} had expected {n}.",
    "The number {n} was read out at the meeting.",
    "Of all the figures, {n} was the one people talked about.",
    "A notice in {T} gave the figure as {n}.",
]
# Ways to state the answer before the sentence that needs it, other than a call note.
EARLIER = [
    "The clerk worked out {a} {op} {b} = {c}.",
    "({a} {op} {b} = {c})",
    "Figures for {T}: {c} {units}.",
    "The figure to remember is {c}.",
]


def filler(rng: random.Random, numbers: list[tuple[str, str]], towns: list[str]) -> str:
    n, units = rng.choice(numbers)
    choices = FILLERS if units else [f for f in FILLERS if "{units}" not in f]
    return rng.choice(choices).format(n=n, units=units, T=rng.choice(towns))


def earlier(rng: random.Random, item: Item) -> str:
    return rng.choice(EARLIER).format(a=item.a, b=item.b, c=item.c, op=item.op, T=item.slots["T"],
                                      units=item.slots["units"])
