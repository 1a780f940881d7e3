/* clockcost: what one clock read costs on this machine, through the vDSO
 * (CLOCK_MONOTONIC, CLOCK_REALTIME) and as a real system call, in ns.
 * A benchmark loop reads the clock once or more per operation, so a
 * machine whose clock source has no vDSO path pays a system call each
 * time.  Usage: clockcost */
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
int main(void){struct timespec a,b,t;int n=1000000;
clock_gettime(CLOCK_MONOTONIC,&a);for(int i=0;i<n;i++)clock_gettime(CLOCK_MONOTONIC,&t);clock_gettime(CLOCK_MONOTONIC,&b);
printf("clock_gettime MONOTONIC: %.1f ns\n",((b.tv_sec-a.tv_sec)*1e9+(b.tv_nsec-a.tv_nsec))/n);
clock_gettime(CLOCK_MONOTONIC,&a);for(int i=0;i<n;i++)clock_gettime(CLOCK_REALTIME,&t);clock_gettime(CLOCK_MONOTONIC,&b);
printf("clock_gettime REALTIME: %.1f ns\n",((b.tv_sec-a.tv_sec)*1e9+(b.tv_nsec-a.tv_nsec))/n);
n=100000;clock_gettime(CLOCK_MONOTONIC,&a);for(int i=0;i<n;i++)syscall(SYS_clock_gettime,CLOCK_MONOTONIC,&t);clock_gettime(CLOCK_MONOTONIC,&b);
printf("syscall clock_gettime: %.1f ns\n",((b.tv_sec-a.tv_sec)*1e9+(b.tv_nsec-a.tv_nsec))/n);return 0;}
