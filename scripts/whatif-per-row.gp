# whatif-per-row.gp — the per-row plot of `ctrain what-if --per-row` (docs/logit-growth.md,
# "Per row"): for one replay (world size, algo, policy), each vocabulary row's own logit push
# per step (-(p - e) . hbar, > 0: the reduction pushes that logit up) against how often its
# token occurs as a target in the train split (+1, so that absent tokens show at 1).
# Not for: computing anything (what-if writes the figures).
#
# Usage: gnuplot -e "in='rows.tsv'; out='rows.png'; n=256; algo='ring'; pol='pure_bf16'" \
#            scripts/whatif-per-row.gp
if (!exists("in") || !exists("out")) { print "usage: gnuplot -e \"in='rows.tsv'; out='rows.png'; n=256; algo='ring'; pol='pure_bf16'\" scripts/whatif-per-row.gp"; exit status 1 }
if (!exists("n")) n = 256
if (!exists("algo")) algo = 'ring'
if (!exists("pol")) pol = 'pure_bf16'
set terminal pngcairo size 900,600 noenhanced
set output out
set datafile separator "\t"
set datafile commentschars "#"
set logscale x
set xlabel "occurrences of the token as a target in the train split + 1"
set ylabel "the row's own logit push per step (SGD rate 1)"
set title sprintf("what-if --per-row: N = %d, %s, %s", n, algo, pol)
set grid
set key top right
sel(col) = (column(1) == n && strcol(2) eq algo && strcol(3) eq pol) ? column(col) : 1/0
plot in every ::1 using (sel(5) + 1):(sel(8)) with points pt 7 ps 0.3 title "one vocabulary row", \
     0 with lines lc rgb "black" notitle
