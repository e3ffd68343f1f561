"""Word lists for the built-in `prose` templates, written for loadgen (no third-party text).

Broad on purpose: everyday, technical, historical and scientific subjects, so free writing is not
dominated by one vocabulary (a draft model trained on code predicts code words too well).
"""

TOPICS = (
    "how lighthouses guided ships before satellite navigation",
    "why bread rises and what yeast actually does",
    "the way city bus networks are planned",
    "how bees decide where to build a new hive",
    "the invention of the printing press and its effect on literacy",
    "why the sky is blue during the day and red at sunset",
    "how a small town library survives on a tight budget",
    "the history of the bicycle",
    "what makes a good night's sleep",
    "how glaciers shape valleys over thousands of years",
    "the economics of running a neighbourhood bakery",
    "how vaccines train the immune system",
    "the role of public parks in crowded cities",
    "how coffee travelled from Ethiopia to the rest of the world",
    "why some languages have many words for snow",
    "how bridges are designed to survive earthquakes",
    "the first year of learning to play the violin",
    "how weather forecasts are made",
    "the life cycle of a monarch butterfly",
    "what happens to recycled plastic after it is collected",
    "how early sailors measured longitude",
    "the pros and cons of working from home",
    "how the human ear turns vibrations into sound",
    "the migration of Arctic terns",
    "how a volunteer fire brigade is organised",
    "why cities build on rivers",
    "the history of board games",
    "how solar panels turn light into electricity",
    "keeping a vegetable garden through a dry summer",
    "how trust is built in a new team",
    "the science of why onions make people cry",
    "how postal systems delivered letters across empires",
    "what octopuses can teach us about intelligence",
    "how a night market changes a street",
    "the design of a good kitchen knife",
    "how forests recover after a wildfire",
    "why people collect stamps, coins and postcards",
    "how tides are caused by the moon and the sun",
    "learning a second language as an adult",
    "how mapmakers decide what to leave off a map",
    "the rise of container shipping",
    "how composting turns waste into soil",
    "the habits of people who keep diaries for decades",
    "how a symphony orchestra rehearses a new piece",
    "why some bridges sway and others do not",
    "the daily routine of a lighthouse keeper",
    "how rainwater is collected and stored in dry regions",
    "the first days of a new school year",
    "how chess players plan several moves ahead",
    "what makes a museum exhibition memorable",
    "how wolves returning to a park changed its rivers",
    "the craft of repairing old clocks",
    "how electric trains draw power from overhead lines",
    "the tradition of shared meals during festivals",
    "how hospitals decide which patient is seen first",
    "why people enjoy being a little bit scared",
    "how paper is made from wood",
    "the long-distance walking routes of Europe",
    "how a small island manages its fresh water",
    "the history of street lighting",
)

ESSAY_ANGLES = (
    "for a general audience, with a clear thesis and three supporting points",
    "arguing one side of a debate about it and answering the strongest objection",
    "comparing how it worked a hundred years ago with how it works today",
    "as a reflective piece that connects it to ordinary daily life",
)

STORY_NARRATORS = (
    "a child seeing it for the first time",
    "an old person remembering it",
    "someone who is sceptical and slowly changes their mind",
    "an animal that watches the people involved",
)

AUDIENCES = (
    "a curious ten-year-old",
    "a busy adult who has five minutes",
    "a university student in an unrelated field",
    "someone who has tried it once and was confused",
)

EMAIL_SITUATIONS = (
    "asking to move a meeting to next week because of a scheduling conflict",
    "thanking a colleague who stayed late to help finish a report",
    "declining an invitation to speak at a conference, politely",
    "following up on an invoice that is thirty days overdue",
    "introducing two people who should work together",
    "apologising for a delayed delivery and offering a partial refund",
    "requesting a day off for a family event",
    "welcoming a new member to the team and describing their first week",
    "asking the landlord to repair a leaking kitchen tap",
    "reminding neighbours about a street clean-up on Saturday",
    "giving constructive feedback on a draft presentation",
    "asking a former teacher for a letter of recommendation",
)

EMAIL_RECIPIENTS = ("a manager", "a close colleague", "a customer", "a stranger")

SUMMARY_STYLES = (
    "in three sentences for someone who has never read it",
    "as a short bulleted list of its key points",
    "in one paragraph, keeping every technical term it defines",
)

PASSAGE_QUESTIONS = (
    "What problem does the passage describe, and what solution does it give?",
    "Which rules or conditions does the passage state, and what happens when they are not met?",
    "Give a concrete example that illustrates the main point of the passage.",
    "What would a beginner most likely misunderstand in this passage, and how would you clarify it?",
)
