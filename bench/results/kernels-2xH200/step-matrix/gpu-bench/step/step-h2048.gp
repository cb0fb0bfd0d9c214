set terminal pngcairo size 1000,600
set output 'step-h2048.png'
set title 'h2048, M=4, --pp 2, two chunks per rank, cuda backend: median slowest-rank step time' noenhanced
set datafile missing 'NaN'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set ylabel 'ms per step'
set yrange [0:*]
set grid ytics
set key below noenhanced
set xtics noenhanced
plot 'step-h2048.dat' using 2:xtic(1) title 'main (3 trials)', 'step-h2048.dat' using 3 title 'replication (2 trials)', 4.184150 with lines dt 2 lw 2 lc rgb 'black' title 'floor, interleaved placement (4.18 ms)', 5.072664 with lines dt 3 lw 2 lc rgb 'red' title 'floor, zbv placement (5.07 ms)'
