// The built-in corpus of `mlxrt fidelity`: written for this project, in several registers (an
// essay, a dialogue, instructions, numbers, code) so that the measured positions see ordinary
// prose as well as digits, punctuation and indentation. Changing it changes every reported figure:
// keep it fixed.
#include "mlxrt/cli/fidelity_corpus.h"

namespace mlxrt::cli {

namespace {

constexpr std::string_view kCorpus = R"corpus(On Bridges, Bread and the Measuring of Time

The town where I grew up sat on both banks of a slow brown river, and for most of its history the
only way across was a ferry that ran when the ferryman felt like it. The bridge came late, in the
spring of the year my grandmother turned nine, and she liked to say that it changed everything
except the river. Before the bridge, the east bank had the mill and the church; the west bank had
the market, the school and the better bakery. Families married across the water only when they had
a good reason to, and arguments about whose side had the nicer orchards could last for decades.

Nobody planned the changes that followed. The bridge was built to carry grain carts, but within a
year it carried children to school, and within ten it carried the east bank's youngest and
cleverest away to the market side, where rents were higher and the evenings were louder. The mill
closed. The church shared its priest with a village upstream. The bakery on the west bank doubled
its ovens, and its owner, a patient woman with flour permanently settled in the creases of her
hands, began rising at three instead of four.

I think about that bridge whenever someone tells me that a new tool will simply make an old task
faster. Speed is rarely the whole story. When a journey that took an afternoon begins to take ten
minutes, people do not keep making the same journeys and pocket the difference; they make
different journeys, and the town rearranges itself around them. The honest question is not "how
much time will this save?" but "what will we do with the time, and what will quietly stop
happening because it is no longer worth the trouble?"

The baker, as it happens, had a precise answer to that question, although she would never have put
it in those words. Her bread depended on time more than on anything else. Flour, water, salt and a
spoonful of the previous day's dough went into a wooden trough in the evening. Overnight the dough
rose, slowly, in a cool corner of the room, and by three in the morning it had developed the sour,
nutty depth that people crossed the new bridge to buy. When a salesman from the city offered her a
fast yeast that would let the dough rise in an hour, she tried it once, tasted the result, and gave
the rest of the packet to the pigs. "It is bread," she told him, "in the way that a photograph of a
meal is dinner."

A recipe, written down, looks like this:

  1. Mix 500 g of flour with 350 g of water and leave it for 30 minutes.
  2. Add 100 g of starter and 10 g of salt; fold the dough four times, 30 minutes apart.
  3. Shape it, cover it, and leave it in a cool place (about 12 to 14 degrees) for 10 to 14 hours.
  4. Bake at 240 degrees for 20 minutes with steam, then at 220 degrees for 25 minutes more.

The numbers matter less than they seem to. A warm kitchen in August and a cold one in January need
different hours, and the baker adjusted by touch: she pressed a floured finger into the dough and
watched how fast the dent filled back in. If it sprang back at once, the dough needed more time; if
it stayed, the dough was ready; if it sighed and collapsed, she had waited too long, and the loaf
would spread flat in the oven. Measurement, for her, was a conversation rather than a verdict.

Clocks tell a similar story at a larger scale. For most of history, an hour was not a fixed length
at all. Daylight was divided into twelve parts, so a summer hour was long and a winter hour short,
and nobody minded, because work followed the sun anyway. Mechanical clocks in church towers began
to count equal hours, but each town set its clock by its own noon, and the clocks of two towns
twenty miles apart could disagree by a couple of minutes without anyone noticing. It took the
railways to make the difference matter. A train that leaves one town at 10:15 and arrives in
another at 11:40 needs both towns to agree on what 10:15 means, and so, within a single
generation, local time gave way to standard time, zones were drawn on maps, and the sun's own
opinion about noon became a matter of historical interest.

"Did people resent it?" my daughter asked when I told her this.

"Some did. A few towns kept two clocks on the same tower for years: one for the railway and one
for everybody else."

"Which one was right?"

"Both of them. They were answering different questions."

She thought about that for a while and then asked whether the river had a time zone, which is the
kind of question that ends a conversation pleasantly.

Here is a small table of the journey between the two banks, as my grandmother remembered it and as
it stands today:

  Year    Crossing        Typical time    Cost
  1921    ferry           40 minutes      2 coins
  1934    wooden bridge   12 minutes      free
  1968    stone bridge     6 minutes      free
  2019    footbridge       4 minutes      free

The figures are approximate; memory rounds generously. What the table cannot show is that in 1921
nobody crossed the river to buy a single loaf, and in 2019 almost nobody crossed it for any other
reason.

A programmer would recognise the pattern. When an operation becomes cheap, code begins to call it
everywhere, and the total cost of the program can go up even as the cost of each call goes down.
The habit of measuring both, the single call and the whole, is worth keeping. A small example in
Python makes the point:

def mean_and_max(values):
    """Return the mean and the largest value of a non-empty list of numbers."""
    total = 0.0
    largest = values[0]
    for v in values:
        total += v
        if v > largest:
            largest = v
    return total / len(values), largest


timings = [0.91, 0.87, 1.02, 0.95, 3.40, 0.89]
average, worst = mean_and_max(timings)
print(f"average {average:.3f} s, worst {worst:.2f} s")

The average here is about 1.34 seconds, but five of the six runs took less than one and a quarter;
the single slow run at 3.40 seconds pulls the mean up by almost half a second. Reporting only the
average would hide that run, and reporting only the worst would hide the five good ones. Good
measurements report both, and say how many runs they came from.

The same is true of any claim that something new behaves "just like" something old. A faster
bridge, a faster yeast, a faster clock: each one can be compared to what it replaced, but the
comparison has to be made on the same journeys, the same loaves, the same afternoons, and the
differences have to be counted rather than guessed. Sometimes the new thing is better in every way
that matters. Sometimes it is better in the way that was measured and worse in a way that was not.
The only remedy is to measure more carefully, to say plainly what was measured, and to keep the old
method available for the days when the difference turns out to matter.

My grandmother lived long enough to cross the footbridge with a walking stick. She would stop in
the middle, where the railings were warm from the afternoon sun, and look downstream at the place
where the ferry used to tie up. There is a bench there now, and a plaque with the ferryman's name
spelled wrong. "He would have charged you to sit on it," she said once, and laughed, and then we
went to buy bread.

A few closing notes, for anyone who wants to try the loaf at home. Use a scale rather than cups;
a cup of flour can weigh anything from 120 to 150 grams depending on how it was scooped. Keep a
notebook: write down the temperature of the room, the hours of the rise and how the crumb looked,
and after a dozen bakes the notebook will teach you more than any recipe. Expect the first three
loaves to be disappointing and the fourth to be surprisingly good. Share the fifth.

Questions people often ask, with short answers:

Q: Can the dough rise in the refrigerator?
A: Yes, at about 4 degrees it will take 24 to 36 hours, and the flavour becomes sharper.

Q: Why did my loaf come out dense?
A: Usually the starter was weak, or the dough was shaped before it had risen by about half.

Q: How long will it keep?
A: Three or four days in a cloth bag; after that, slice it, freeze it, and toast it from frozen.

Q: Is the long rise really necessary?
A: Necessary is a strong word. It is the difference between bread that fills you and bread that
you remember, and only you can decide which one you are baking today.
)corpus";

}  // namespace

std::string_view fidelity_corpus() { return kCorpus; }

}  // namespace mlxrt::cli
