#include <sys/mman.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
static double cpu(){struct timespec t;clock_gettime(CLOCK_PROCESS_CPUTIME_ID,&t);return t.tv_sec+t.tv_nsec/1e9;}
// argv1: chunk KiB, argv2: huge (0/1); 1 GiB total, populated, fresh process
int main(int argc,char**argv){size_t chunk=(size_t)atoi(argv[1])<<10; int huge=atoi(argv[2]); size_t total=1UL<<30;
 double t=cpu(), w=now();
 for(size_t k=0;k<total/chunk;k++){
  size_t len=chunk+(huge?(2<<20):0);
  char*p=mmap(0,len,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
  if(huge){p=(char*)(((uintptr_t)p+(2<<20)-1)&~(uintptr_t)((2<<20)-1)); madvise(p,chunk,MADV_HUGEPAGE);}
  madvise(p,chunk,MADV_POPULATE_WRITE);
 }
 printf("chunk %zu KiB huge %d: %.3f s/GiB cpu %.3f wall\n",chunk>>10,huge,cpu()-t,now()-w);
}
